package workers

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// A signer whose work hangs is not waited for: the other signers' work of the same and
// later passes runs, and the hung signer is not started twice.
func TestSignerTasksIsolateAHungSigner(t *testing.T) {
	tasks := newSignerTasks(4)
	ctx, cancel := context.WithCancel(context.Background())
	release := make(chan struct{})
	var hungRuns, otherRuns atomic.Int32
	work := func(ctx context.Context, lease domain.Lease) {
		if lease.Signer == "hung" {
			hungRuns.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return
		}
		otherRuns.Add(1)
	}
	leases := []domain.Lease{{Signer: "hung"}, {Signer: "a"}, {Signer: "b"}}
	for range 5 {
		tasks.run(ctx, leases, work)
		time.Sleep(10 * time.Millisecond)
	}
	if got := otherRuns.Load(); got < 10 {
		t.Fatalf("the healthy signers ran %d times in 5 passes, want 10", got)
	}
	if got := hungRuns.Load(); got != 1 {
		t.Fatalf("the hung signer was started %d times while busy, want 1", got)
	}
	// Released, it runs once more for the passes that found it busy.
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for hungRuns.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := hungRuns.Load(); got != 2 {
		t.Fatalf("after release the hung signer ran %d times in all, want 2", got)
	}
	cancel()
	tasks.wait()
}

// No more than limit signers run at once.
func TestSignerTasksBoundConcurrency(t *testing.T) {
	tasks := newSignerTasks(2)
	var running, peak atomic.Int32
	var mu sync.Mutex
	work := func(context.Context, domain.Lease) {
		n := running.Add(1)
		mu.Lock()
		if n > peak.Load() {
			peak.Store(n)
		}
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		running.Add(-1)
	}
	var leases []domain.Lease
	for _, s := range []string{"a", "b", "c", "d", "e", "f"} {
		leases = append(leases, domain.Lease{Signer: s})
	}
	tasks.run(context.Background(), leases, work)
	tasks.wait()
	if peak.Load() != 2 {
		t.Fatalf("peak concurrency %d, want 2", peak.Load())
	}
}
