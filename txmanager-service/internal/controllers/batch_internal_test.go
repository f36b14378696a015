package controllers

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A batch's creates all wait for the writer at once, so every function handed to the
// runners must start at once, however many are running; runners that finished take the
// next burst instead of new goroutines, and leave once idle.
func TestRunnersStartEveryFunctionAtOnceAndAreReused(t *testing.T) {
	r := &runners{idleFor: time.Second}
	var started atomic.Int64
	burst := func(n int) {
		t.Helper()
		release := make(chan struct{})
		var done sync.WaitGroup
		for range n {
			done.Add(1)
			r.run(func() {
				defer done.Done()
				started.Add(1)
				<-release // held until all n started: they run side by side
			})
		}
		deadline := time.Now().Add(10 * time.Second)
		for started.Load() < int64(n) {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d functions started: the runners do not start each at once", started.Load(), n)
			}
			time.Sleep(time.Millisecond)
		}
		close(release)
		done.Wait()
		started.Store(0)
	}
	const n = 200
	burst(n)
	time.Sleep(20 * time.Millisecond) // the burst's runners are back waiting
	if got := idleRunners(r, time.Second); got < n/2 {
		t.Fatalf("%d runners wait for work after a burst of %d, want most of them", got, n)
	}
	burst(n)
	time.Sleep(1500 * time.Millisecond) // past idleFor
	if got := idleRunners(r, 50*time.Millisecond); got != 0 {
		t.Fatalf("%d runners still wait after %s idle, want none", got, r.idleFor)
	}
}

// idleRunners counts the runners that take a job within wait of asking, leaving each
// blocked until all are counted so none is counted twice.
func idleRunners(r *runners, wait time.Duration) int {
	hold := make(chan struct{})
	defer close(hold)
	n := 0
	for {
		select {
		case r.jobs <- func() { <-hold }:
			n++
		case <-time.After(wait):
			return n
		}
	}
}
