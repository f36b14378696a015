package services_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// gatedBarrier is a standby that confirms a wait only when the test releases it.
type gatedBarrier struct {
	calls   atomic.Int32
	started chan int32
	release chan error
}

func newGatedBarrier() *gatedBarrier {
	return &gatedBarrier{started: make(chan int32, 16), release: make(chan error)}
}

func (b *gatedBarrier) AwaitStandby(ctx context.Context) error {
	b.started <- b.calls.Add(1)
	select {
	case err := <-b.release:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Readers share the waits, and none is answered by a wait that started before it asked.
func TestStandbyWaitsAreSharedAndNeverStale(t *testing.T) {
	b := newGatedBarrier()
	w := services.NewStandbyWait(b)
	ctx := t.Context()

	first := make(chan error, 1)
	go func() { first <- w.Await(ctx) }()
	if round := <-b.started; round != 1 {
		t.Fatalf("first wait is round %d", round)
	}
	// Ten readers arrive while round 1 is in flight: its answer may predate their reads.
	const late = 10
	var wg sync.WaitGroup
	var answered atomic.Int32
	for range late {
		wg.Go(func() {
			if err := w.Await(ctx); err != nil {
				t.Errorf("late reader: %v", err)
			}
			answered.Add(1)
		})
	}
	time.Sleep(50 * time.Millisecond) // let them queue
	b.release <- nil
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if round := <-b.started; round != 2 {
		t.Fatalf("the late readers' wait is round %d, want 2", round)
	}
	time.Sleep(50 * time.Millisecond)
	if n := answered.Load(); n != 0 {
		t.Fatalf("%d late readers were answered by the round that started before them", n)
	}
	b.release <- nil
	wg.Wait()
	if calls := b.calls.Load(); calls != 2 {
		t.Errorf("%d waits for 1+%d readers, want 2", calls, late)
	}
}

// A wait the standby does not confirm is a 503 for the reader, with a time to come back;
// a reader whose own deadline passes stops waiting.
func TestStandbyWaitFailures(t *testing.T) {
	b := newGatedBarrier()
	w := services.NewStandbyWait(b)

	failed := make(chan error, 1)
	go func() { failed <- w.Read(t.Context(), "the page") }()
	<-b.started
	b.release <- errors.New("connection reset")
	err := <-failed
	var unavailable *domain.UnavailableError
	if !errors.As(err, &unavailable) || unavailable.RetryAfter <= 0 || !errors.Is(err, domain.ErrUnavailable) {
		t.Fatalf("failed wait: %v, want an UnavailableError with RetryAfter", err)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	go func() { <-b.started }()
	started := time.Now()
	if err := w.Await(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a reader past its deadline: %v", err)
	}
	if waited := time.Since(started); waited > time.Second {
		t.Errorf("the reader waited %v past its 100ms deadline", waited)
	}
	b.release <- nil // ends the round still in flight
}
