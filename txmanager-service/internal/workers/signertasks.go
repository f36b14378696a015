package workers

import (
	"context"
	"sync"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// signerTasks runs one loop's per-signer work with every signer on its own: at most limit
// signers at once, and a signer whose work from an earlier pass is still running (a hung
// endpoint or external signer, until its deadline) is not waited for. The pass goes on with
// the other signers; the busy one runs once more as soon as it finishes, so a wake that
// arrived meanwhile is not lost.
type signerTasks struct {
	slots chan struct{}

	mu      sync.Mutex
	running map[string]*signerTask
	wg      sync.WaitGroup
}

type signerTask struct {
	// again: a pass found the signer busy; run once more before letting go.
	again bool
	lease domain.Lease
}

func newSignerTasks(limit int) *signerTasks {
	return &signerTasks{slots: make(chan struct{}, max(limit, 1)), running: map[string]*signerTask{}}
}

// run starts fn for every lease whose signer is not busy and returns once each has a slot;
// it does not wait for the work itself. ctx ends the work (the loop's context).
func (t *signerTasks) run(ctx context.Context, leases []domain.Lease, fn func(context.Context, domain.Lease)) {
	for _, lease := range leases {
		if !t.claim(lease) {
			continue
		}
		select {
		case t.slots <- struct{}{}:
		case <-ctx.Done():
			t.release(lease.Signer)
			return
		}
		t.wg.Go(func() {
			defer func() { <-t.slots }()
			for {
				fn(ctx, lease)
				next, again := t.finish(lease.Signer)
				if !again || ctx.Err() != nil {
					return
				}
				lease = next
			}
		})
	}
}

// claim marks the signer busy, or notes that it should run again when it is already.
func (t *signerTasks) claim(lease domain.Lease) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if task, busy := t.running[lease.Signer]; busy {
		task.again, task.lease = true, lease
		return false
	}
	t.running[lease.Signer] = &signerTask{lease: lease}
	return true
}

// finish ends one run; when a pass asked for another meanwhile it keeps the signer busy
// and returns the newest lease to run with.
func (t *signerTasks) finish(signer string) (domain.Lease, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	task := t.running[signer]
	if task.again {
		task.again = false
		return task.lease, true
	}
	delete(t.running, signer)
	return domain.Lease{}, false
}

func (t *signerTasks) release(signer string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.running, signer)
}

// wait blocks until every started run has ended (after the loop's context was cancelled).
func (t *signerTasks) wait() { t.wg.Wait() }
