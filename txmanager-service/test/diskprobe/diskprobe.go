// Package diskprobe times flushes to the database's disk while a benchmark runs: an 8 kB
// write and fdatasync at a steady interval, in a file beside PostgreSQL's data directory.
//
// Every create waits for its batch's commit, and every commit for PostgreSQL's WAL flush,
// so a flush that takes 200 ms holds everything in flight for as long, whatever the service
// does. On this machine class flushes usually take well under a millisecond, but some VMs'
// disks stall for 100-500 ms a few times a minute; reporting the slowest flush beside a
// run's figures lets a reader tell a slow disk from a slow service, as the hypervisor's
// steal tells a slow machine.
package diskprobe

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// every keeps the probe's own flushes a small share of the disk's work (the service
// commits several hundred times a second under load) while still catching any stall
// longer than itself.
const every = 20 * time.Millisecond

// Probe flushes a file at a steady interval until Finish.
type Probe struct {
	interval time.Duration
	stop     chan struct{}
	stopOnce sync.Once
	done     sync.WaitGroup
	flushes  []time.Duration
}

// Summary is what a probe saw.
type Summary struct {
	Interval time.Duration // between flushes
	Flushes  int
	P99, Max time.Duration
}

func (s Summary) String() string {
	return fmt.Sprintf("disk flushes (8 kB, fdatasync, every %s): slowest %s, p99 %s of %d",
		s.Interval, s.Max.Round(10*time.Microsecond), s.P99.Round(10*time.Microsecond), s.Flushes)
}

// querier is a connection or a pool.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ForDatabase starts a probe beside the data directory of db's server, or returns nil when
// that directory is not on this machine (a remote server) or cannot be read.
func ForDatabase(ctx context.Context, db querier) (*Probe, error) {
	var dataDir string
	if err := db.QueryRow(ctx, "SHOW data_directory").Scan(&dataDir); err != nil {
		return nil, fmt.Errorf("find the data directory: %w", err)
	}
	if !onThisMachine(dataDir) {
		return nil, nil
	}
	return Start(filepath.Dir(dataDir), every)
}

// onThisMachine tells a local server's data directory from another machine's path.
func onThisMachine(dataDir string) bool {
	info, err := os.Stat(dataDir)
	return err == nil && info.IsDir()
}

// Start flushes a file in dir every interval until Finish.
func Start(dir string, interval time.Duration) (*Probe, error) {
	f, err := os.CreateTemp(dir, "txm-disk-probe-")
	if err != nil {
		return nil, fmt.Errorf("disk probe: %w", err)
	}
	p := &Probe{interval: interval, stop: make(chan struct{})}
	p.done.Go(func() {
		defer func() {
			// A probe file left behind (a failed removal) is harmless: 8 kB in a temp name.
			_ = f.Close()
			_ = os.Remove(f.Name())
		}()
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
			p.flushes = append(p.flushes, time.Since(started))
			select {
			case <-p.stop:
				return
			case <-ticker.C:
			}
		}
	})
	return p, nil
}

// Finish stops the probe and summarises its flushes; ok is false when none was timed
// (or p is nil: no probe ran). It may be called again, as a deferred clean-up.
func (p *Probe) Finish() (s Summary, ok bool) {
	if p == nil {
		return Summary{}, false
	}
	p.stopOnce.Do(func() { close(p.stop) })
	p.done.Wait()
	if len(p.flushes) == 0 {
		return Summary{}, false
	}
	slices.Sort(p.flushes)
	return Summary{Interval: p.interval, Flushes: len(p.flushes), P99: p.flushes[len(p.flushes)*99/100], Max: p.flushes[len(p.flushes)-1]}, true
}
