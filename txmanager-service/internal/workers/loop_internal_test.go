package workers

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// eventually waits up to timeout for cond.
func eventually(timeout time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// What makes a loop run its job: a wake at once, the interval, a delayed wake once for
// several asks; and what does not: a delayed wake the loop's Stop came before.
func TestLoopRunsWhenWokenOrDue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		interval time.Duration
		poke     func(l *Loop)
		// settle is how long the test watches; want is how many runs it must see then
		// (atLeast: at least that many, the interval runs on).
		settle  time.Duration
		want    int32
		atLeast bool
		stop    bool // Stop right after poke
	}{
		{name: "a wake runs the job at once", interval: time.Hour, poke: func(l *Loop) { l.Wake() }, settle: 200 * time.Millisecond, want: 1},
		{name: "the interval runs the job unasked", interval: 10 * time.Millisecond, poke: func(*Loop) {}, settle: 200 * time.Millisecond, want: 3, atLeast: true},
		{name: "delayed wakes asked while one is pending run the job once", interval: time.Hour, poke: func(l *Loop) {
			l.WakeAfter(30 * time.Millisecond)
			l.WakeAfter(time.Millisecond)
			l.WakeAfter(30 * time.Millisecond)
		}, settle: 300 * time.Millisecond, want: 1},
		{name: "a delayed wake not yet due when the loop stops never runs", interval: time.Hour, poke: func(l *Loop) { l.WakeAfter(50 * time.Millisecond) },
			settle: 200 * time.Millisecond, want: 0, stop: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var runs atomic.Int32
			l := NewLoop(tc.interval, func(context.Context) { runs.Add(1) })
			l.Start(t.Context())
			tc.poke(l)
			if tc.stop {
				l.Stop()
			}
			time.Sleep(tc.settle)
			l.Stop()
			got := runs.Load()
			if got != tc.want && !(tc.atLeast && got > tc.want) {
				t.Fatalf("ran %d times, want %d (at least: %t)", got, tc.want, tc.atLeast)
			}
		})
	}
}

// Wakes that arrive while the job runs coalesce into one more run, not one per wake.
func TestLoopCoalescesWakesDuringARun(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var runs atomic.Int32
	l := NewLoop(time.Hour, func(context.Context) {
		if runs.Add(1) == 1 {
			<-release
		}
	})
	l.Start(t.Context())
	defer l.Stop()
	l.Wake()
	if !eventually(time.Second, func() bool { return runs.Load() == 1 }) {
		t.Fatal("the first wake did not run the job")
	}
	for range 5 {
		l.Wake()
	}
	close(release)
	time.Sleep(100 * time.Millisecond)
	if got := runs.Load(); got != 2 {
		t.Fatalf("five wakes during a run caused %d runs in all, want 2", got)
	}
}

// Stop interrupts the job in progress (its context ends), waits for it, and may be called
// again; the context the loop was started with ending does not stop it.
func TestLoopStopInterruptsTheRunningJob(t *testing.T) {
	t.Parallel()
	started, interrupted := make(chan struct{}), make(chan struct{})
	l := NewLoop(time.Hour, func(ctx context.Context) {
		close(started)
		<-ctx.Done()
		close(interrupted)
	})
	parent, cancelParent := context.WithCancel(context.Background())
	l.Start(parent)
	cancelParent() // a request's context ending must not end a background loop
	l.Wake()
	select {
	case <-started:
	case <-time.After(time.Second):
		t.Fatal("the job did not start after the parent context ended")
	}
	stopped := make(chan struct{})
	go func() {
		l.Stop()
		l.Stop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop did not return")
	}
	select {
	case <-interrupted:
	default:
		t.Fatal("Stop returned before the job it interrupted ended")
	}
}

// A bounded loop's pass is cut off at the interval: a slow database never lets passes pile
// up behind one another.
func TestBoundedLoopCutsAPassOffAtTheInterval(t *testing.T) {
	t.Parallel()
	const interval = 50 * time.Millisecond
	deadlines := make(chan time.Duration, 1)
	l := boundedLoop(interval, func(ctx context.Context) {
		deadline, ok := ctx.Deadline()
		if !ok {
			deadlines <- -1
			return
		}
		select {
		case deadlines <- time.Until(deadline):
		default:
		}
		<-ctx.Done()
	})
	l.Start(t.Context())
	defer l.Stop()
	select {
	case left := <-deadlines:
		if left < 0 || left > interval {
			t.Fatalf("a pass had %s left to run, want a deadline within the interval %s", left, interval)
		}
	case <-time.After(time.Second):
		t.Fatal("no pass ran")
	}
}

// A pass that ends while it waits for a free slot lets go of the signer it claimed: the
// next pass runs it.
func TestSignerTasksReleaseASignerWhosePassEnded(t *testing.T) {
	t.Parallel()
	tasks := newSignerTasks(1)
	hold := make(chan struct{})
	var ran atomic.Int32
	tasks.run(context.Background(), []domain.Lease{{Signer: "busy"}}, func(context.Context, domain.Lease) { <-hold })

	ended, cancel := context.WithCancel(context.Background())
	cancel()
	// The only slot is taken and the pass's context has ended: "waiting" is not started.
	tasks.run(ended, []domain.Lease{{Signer: "waiting"}}, func(context.Context, domain.Lease) { ran.Add(1) })
	close(hold)
	tasks.run(context.Background(), []domain.Lease{{Signer: "waiting"}}, func(context.Context, domain.Lease) { ran.Add(1) })
	tasks.wait()
	if got := ran.Load(); got != 1 {
		t.Fatalf("the signer whose first pass ended ran %d times, want 1 (by the next pass)", got)
	}
}
