package workers

import (
	"context"
	"sync"
	"time"
)

// Loop runs one job every interval, or sooner when woken. Wakes coalesce: a burst of them
// while the job runs causes one extra run, not many.
type Loop struct {
	interval time.Duration
	job      func(ctx context.Context)
	wake     chan struct{}
	stop     chan struct{}
	stopOnce sync.Once
	cancel   context.CancelFunc
	wg       sync.WaitGroup

	mu      sync.Mutex
	delayed *time.Timer // a WakeAfter not yet due; stopped with the loop
}

// NewLoop builds a loop; Start runs it.
func NewLoop(interval time.Duration, job func(ctx context.Context)) *Loop {
	return &Loop{interval: interval, job: job, wake: make(chan struct{}, 1), stop: make(chan struct{}), cancel: func() {}}
}

// Start launches the loop; Stop cancels the context the job runs with.
func (l *Loop) Start(ctx context.Context) {
	ctx, l.cancel = context.WithCancel(context.WithoutCancel(ctx))
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		ticker := time.NewTicker(l.interval)
		defer ticker.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-ticker.C:
			case <-l.wake:
			}
			l.job(ctx)
		}
	}()
}

// Wake asks for a run as soon as the current one (if any) ends.
func (l *Loop) Wake() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// WakeAfter asks for a run after d, unless one is asked for already: work that must go on
// soon but not at once (a recovery in progress) paces itself with it.
func (l *Loop) WakeAfter(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.delayed != nil {
		return
	}
	l.delayed = time.AfterFunc(d, func() {
		l.mu.Lock()
		l.delayed = nil
		l.mu.Unlock()
		l.Wake()
	})
}

// Stop interrupts the job in progress, ends the loop and waits for it.
func (l *Loop) Stop() {
	l.stopOnce.Do(func() {
		l.cancel()
		close(l.stop)
		l.mu.Lock()
		if l.delayed != nil {
			l.delayed.Stop()
		}
		l.mu.Unlock()
	})
	l.wg.Wait()
}
