package services

import (
	"context"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// FinalWait serves reads that ask to wait until a transaction is final (GetTx and
// GetTxByRequest with wait): a long-poll, so a caller waiting for one transaction needs
// neither the feed nor a polling loop of its own. A transaction becomes final in the same
// commit as its completion, so the read is tried again whenever this node's sequencer
// sees the feed move (after each finality pass here, and every sequenceInterval for what
// other nodes positioned) and at least every FeedConfig.PollInterval.
type FinalWait struct {
	notify *FeedNotifier
	cfg    FeedConfig
}

// NewFinalWait wires the long-poll to the feed's notifier and bounds.
func NewFinalWait(notify *FeedNotifier, cfg FeedConfig) *FinalWait {
	return &FinalWait{notify: notify, cfg: cfg}
}

// Read returns read's transaction as soon as it is final (CONFIRMED or FAILED_FINAL), or
// as it stands once wait has passed. A longer wait than FeedConfig.MaxWait is cut to it: a
// caller that asks again after an answer that is not final loses nothing, and need not
// know this deployment's bound. A read error ends the wait at once.
func (w *FinalWait) Read(ctx context.Context, wait time.Duration, read func(context.Context) (domain.ManagedTx, error)) (domain.ManagedTx, error) {
	if wait < 0 {
		return domain.ManagedTx{}, &domain.ValidationError{Field: "wait", Reason: "must not be negative"}
	}
	deadline := answerBy(ctx, min(wait, w.cfg.MaxWait))
	for {
		// Taken before the read: a round that positions the completion after the read
		// still wakes this wait.
		changed := w.notify.Changed()
		tx, err := read(ctx)
		remaining := time.Until(deadline)
		if err != nil || tx.State.Final() || remaining <= 0 {
			return tx, err
		}
		select {
		case <-ctx.Done():
			return tx, nil
		case <-changed:
		case <-time.After(min(w.cfg.PollInterval, remaining)):
		}
	}
}

// answerBy is when a long-poll of wait answers: before the request's own deadline cuts it
// off, so the caller gets an answer rather than a timeout.
func answerBy(ctx context.Context, wait time.Duration) time.Time {
	deadline := time.Now().Add(wait)
	if d, ok := ctx.Deadline(); ok && d.Add(-time.Second).Before(deadline) {
		deadline = d.Add(-time.Second)
	}
	return deadline
}
