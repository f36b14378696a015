package services

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// StandbyBarrier commits a transaction of the service's own that waits for the database's
// synchronous standby.
type StandbyBarrier interface {
	// AwaitStandby returns once every commit made before it is on the synchronous standby,
	// at once where the server names none.
	AwaitStandby(ctx context.Context) error
}

// standbyWaitTimeout bounds one wait for the standby; past it the answer that waited is
// refused, and its caller asked to come again.
const standbyWaitTimeout = 2 * time.Second

// StandbyWait holds answers given from the database back until what they tell of is on the
// synchronous standby. A commit normally becomes visible only once the standby has it, but
// not always: a commit whose wait for the standby was cut short (its connection's deadline,
// a cancel, a terminated backend) stays committed and visible on the primary, and so does
// one made with synchronous_commit off (the service's receipt and broadcast records). A
// failover loses them. A retried create answered from such a transaction acknowledges one
// that is then lost; a feed page serving its completion hands out a position that a later
// completion takes again, which a reader past it never sees.
//
// Readers share waits: one is in flight at a time, and a reader joins the next one to start
// after its read (one that started before could return before the reader's rows are on
// the standby). So many readers cost one commit a round, and a standby that stopped
// answering holds one connection, not one per reader.
type StandbyWait struct {
	barrier StandbyBarrier
	mu      sync.Mutex
	// running is the wait in flight (nil: none); next is the one to start when it ends,
	// which readers that came meanwhile wait for.
	running, next *standbyRound
}

// standbyRound is one wait for the standby; err is set before done is closed.
type standbyRound struct {
	done chan struct{}
	err  error
}

// NewStandbyWait builds the waits on barrier.
func NewStandbyWait(barrier StandbyBarrier) *StandbyWait {
	return &StandbyWait{barrier: barrier}
}

// Await returns once every commit made before it is on the synchronous standby, or with an
// error when the wait that covers it failed, standbyWaitTimeout passed, or ctx ended.
func (w *StandbyWait) Await(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, standbyWaitTimeout)
	defer cancel()
	w.mu.Lock()
	var round *standbyRound
	switch {
	case w.running == nil:
		round = &standbyRound{done: make(chan struct{})}
		w.running = round
		go w.run(round)
	case w.next != nil:
		round = w.next
	default:
		round = &standbyRound{done: make(chan struct{})}
		w.next = round
	}
	w.mu.Unlock()
	select {
	case <-round.done:
		return round.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run waits for the standby for round, then starts the round readers queued meanwhile.
func (w *StandbyWait) run(round *standbyRound) {
	for round != nil {
		ctx, cancel := context.WithTimeout(context.Background(), standbyWaitTimeout)
		round.err = w.barrier.AwaitStandby(ctx)
		cancel()
		close(round.done)
		w.mu.Lock()
		round, w.next = w.next, nil
		w.running = round
		w.mu.Unlock()
	}
}

// Read holds a read's answer back until what it read is on the synchronous standby;
// past the bound the reader is told to come back (503 with Retry-After).
func (w *StandbyWait) Read(ctx context.Context, what string) error {
	if err := w.Await(ctx); err != nil {
		return &domain.UnavailableError{Reason: fmt.Sprintf("%s is not known to be on the database's standby yet", what), RetryAfter: time.Second, Err: err}
	}
	return nil
}
