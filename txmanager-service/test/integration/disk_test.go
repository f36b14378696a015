package integration

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// diskMeter times a flush to the database's disk while a benchmark runs: an 8 kB write and
// fdatasync every diskProbeEvery, in a file beside the data directory. Every create waits
// for its batch's commit, and the commit for PostgreSQL's WAL flush, so a flush that takes
// 200 ms holds every create in flight for as long, whatever the service does. On this
// machine class flushes usually take well under a millisecond, but some VMs' disks stall
// for 100-250 ms a few times in a run; reporting the slowest flush lets a reader tell a
// slow disk from a slow service (as the steal meter tells a slow machine). It reports
// nothing when the data directory is not on this machine (a remote TEST_DATABASE_URL).
type diskMeter struct {
	stop    chan struct{}
	done    sync.WaitGroup
	flushes []time.Duration
}

// diskProbeEvery keeps the probe's own flushes a small share of the disk's work (a commit
// of the hot signer's batches is several hundred a second) while still catching any stall
// longer than itself.
const diskProbeEvery = 20 * time.Millisecond

// startDiskMeter starts the probe when pool's server keeps its data on this machine.
func startDiskMeter(tb testing.TB, pool *pgxpool.Pool) *diskMeter {
	tb.Helper()
	var dataDir string
	if err := pool.QueryRow(context.Background(), "SHOW data_directory").Scan(&dataDir); err != nil {
		tb.Logf("disk probe skipped: %v", err)
		return nil
	}
	if _, err := os.Stat(dataDir); err != nil {
		return nil // another machine's path
	}
	m, err := probeDisk(filepath.Dir(dataDir), diskProbeEvery)
	if err != nil {
		tb.Logf("disk probe skipped: %v", err)
		return nil
	}
	return m
}

// probeDisk flushes a file in dir every interval until finish is called.
func probeDisk(dir string, interval time.Duration) (*diskMeter, error) {
	f, err := os.CreateTemp(dir, "txm-disk-probe-")
	if err != nil {
		return nil, err
	}
	m := &diskMeter{stop: make(chan struct{})}
	m.done.Go(func() {
		defer os.Remove(f.Name())
		defer f.Close()
		page := make([]byte, 8192)
		ticker := time.NewTicker(interval)
		defer ticker.Stop()
		for {
			started := time.Now()
			if _, err := f.WriteAt(page, 0); err != nil {
				return
			}
			if err := f.Sync(); err != nil {
				return
			}
			m.flushes = append(m.flushes, time.Since(started))
			select {
			case <-m.stop:
				return
			case <-ticker.C:
			}
		}
	})
	return m, nil
}

// finish stops the probe and returns its flush times, slowest last.
func (m *diskMeter) finish() []time.Duration {
	close(m.stop)
	m.done.Wait()
	slices.Sort(m.flushes)
	return m.flushes
}

// report adds the probe's p99 and slowest flush to the benchmark's metrics.
func (m *diskMeter) report(b *testing.B) {
	if m == nil {
		return
	}
	flushes := m.finish()
	if len(flushes) == 0 {
		return
	}
	b.ReportMetric(float64(flushes[len(flushes)*99/100].Microseconds())/1000, "disk-flush-p99-ms")
	b.ReportMetric(float64(flushes[len(flushes)-1].Microseconds())/1000, "disk-flush-max-ms")
}

func TestDiskProbeTimesFlushes(t *testing.T) {
	dir := t.TempDir()
	m, err := probeDisk(dir, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	flushes := m.finish()
	if len(flushes) < 2 {
		t.Fatalf("%d flushes timed in 50ms at one a millisecond, want several", len(flushes))
	}
	if !slices.IsSorted(flushes) || flushes[0] <= 0 {
		t.Fatalf("flush times %v: want positive, slowest last", flushes)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "txm-disk-probe-*")); len(left) > 0 {
		t.Fatalf("probe left %v behind", left)
	}
}
