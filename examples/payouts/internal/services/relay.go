package services

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	kerrors "github.com/go-kratos/kratos/v2/errors"
	"github.com/go-kratos/kratos/v2/log"

	"github.com/bionicotaku/lingo-utils/txmanager"
	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"

	"github.com/bionicotaku/txmanager-examples/payouts/internal/conf"
	"github.com/bionicotaku/txmanager-examples/payouts/internal/domain"
)

// RelayConfig paces the relay.
type RelayConfig struct {
	BatchSize     int
	ParallelSends int
	SendTimeout   time.Duration
	RetryBackoff  time.Duration
	MaxBackoff    time.Duration
}

// NewRelayConfig reads the relay's settings.
func NewRelayConfig(bc *conf.Bootstrap) RelayConfig {
	return RelayConfig{
		BatchSize: bc.Relay.BatchSize, ParallelSends: bc.Relay.ParallelSends, SendTimeout: bc.Relay.SendTimeout.Std(),
		RetryBackoff: bc.Relay.RetryBackoff.Std(), MaxBackoff: bc.Relay.MaxBackoff.Std(),
	}
}

// Relay sends outbox rows to txmanager.
//
// Exactly one transaction per payout rests on two things. The outbox row's id is the
// requestId, so a send repeated after a crash between the send and the commit that marks
// the row sent is a replay: txmanager answers with the transaction it created the first
// time. And the rows stay locked (FOR UPDATE SKIP LOCKED) from the claim to that commit,
// so a second relay running at the same time never sends them at all.
type Relay struct {
	tx      txmanager.Manager
	outbox  OutboxRepository
	payouts PayoutRepository
	txm     TxManagerClient
	signer  Signer
	cfg     RelayConfig
	log     *log.Helper
}

// NewRelay builds the relay.
func NewRelay(tx txmanager.Manager, outbox OutboxRepository, payouts PayoutRepository, txm TxManagerClient, signer Signer, cfg RelayConfig, logger log.Logger) *Relay {
	return &Relay{tx: tx, outbox: outbox, payouts: payouts, txm: txm, signer: signer, cfg: cfg,
		log: log.NewHelper(log.With(logger, "component", "relay"))}
}

// RelayResult counts what one batch did.
type RelayResult struct {
	Sent     int // a transaction is recorded on the payout
	Replayed int // of Sent: txmanager already had it (a re-send after a crash)
	Rejected int // txmanager refused the intent for good: the payout FAILED
	Deferred int // the send failed for now; the row is due again after a backoff
}

// Claimed is how many rows the batch handled.
func (r RelayResult) Claimed() int { return r.Sent + r.Rejected + r.Deferred }

// sendOutcome is one row's create.
type sendOutcome struct {
	resp *v1.CreateTxResponse
	err  error
}

// RelayBatch claims due outbox rows, sends them, and records the results, all inside one
// transaction that holds the rows' locks across the sends. A crash or error anywhere in it
// rolls everything back: the rows are due again, and their re-send is a replay.
func (r *Relay) RelayBatch(ctx context.Context) (RelayResult, error) {
	var res RelayResult
	// The transaction outlives the sends it waits for; conf.Check keeps the database
	// timeout above SendTimeout.
	opts := txmanager.DefaultOptions().WithTraceName("payouts.relay").WithTimeout(r.cfg.SendTimeout + 5*time.Second)
	err := r.tx.WithinTx(ctx, opts, func(ctx context.Context, sess txmanager.Session) error {
		res = RelayResult{}
		items, err := r.outbox.ClaimDue(ctx, sess, r.cfg.BatchSize)
		if err != nil || len(items) == 0 {
			return err
		}
		outcomes := r.sendAll(ctx, items)
		if err := ctx.Err(); err != nil {
			// Stopping: what was sent is replayed next time.
			return err
		}
		for i, item := range items {
			if err := r.record(ctx, sess, item, outcomes[i], &res); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return RelayResult{}, fmt.Errorf("relay batch: %w", err)
	}
	return res, nil
}

// sendAll creates every item's transaction, ParallelSends at a time. The session is not
// touched here: a pgx transaction serves one query at a time.
func (r *Relay) sendAll(ctx context.Context, items []domain.OutboxItem) []sendOutcome {
	outcomes := make([]sendOutcome, len(items))
	sem := make(chan struct{}, r.cfg.ParallelSends)
	var wg sync.WaitGroup
	for i, item := range items {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			sendCtx, cancel := context.WithTimeout(ctx, r.cfg.SendTimeout)
			defer cancel()
			outcomes[i].resp, outcomes[i].err = r.txm.Create(sendCtx, &v1.CreateTxRequest{
				Signer:    string(r.signer),
				RequestId: item.ID.String(),
				To:        item.To,
				Value:     item.AmountWei,
			})
		})
	}
	wg.Wait()
	return outcomes
}

// record writes one send's result on the session.
func (r *Relay) record(ctx context.Context, sess txmanager.Session, item domain.OutboxItem, out sendOutcome, res *RelayResult) error {
	if out.err == nil {
		txID := out.resp.GetTx().GetTxId()
		if err := r.payouts.RecordSubmission(ctx, sess, item.PayoutID, txID); err != nil {
			return err
		}
		if err := r.outbox.MarkSent(ctx, sess, item.ID, ""); err != nil {
			return err
		}
		res.Sent++
		if !out.resp.GetCreated() {
			res.Replayed++
			r.log.Infow("msg", "outbox row re-sent: txmanager returned the transaction it already had",
				"payout_id", item.PayoutID.String(), "request_id", item.ID.String(), "tx_id", txID)
		}
		return nil
	}
	if reason, final := Rejection(out.err); final {
		if err := r.payouts.MarkRejected(ctx, sess, item.PayoutID, reason); err != nil {
			return err
		}
		if err := r.outbox.MarkSent(ctx, sess, item.ID, reason); err != nil {
			return err
		}
		res.Rejected++
		r.log.Warnw("msg", "txmanager refused the payout", "payout_id", item.PayoutID.String(), "reason", reason)
		return nil
	}
	backoff := Backoff(r.cfg.RetryBackoff, r.cfg.MaxBackoff, item.Attempts)
	if err := r.outbox.Defer(ctx, sess, item.ID, out.err.Error(), backoff); err != nil {
		return err
	}
	res.Deferred++
	r.log.Warnw("msg", "send failed; retrying later", "payout_id", item.PayoutID.String(),
		"attempts", item.Attempts+1, "retry_in", backoff.String(), "error", out.err.Error())
	return nil
}

// Rejection reports whether err is a final refusal of the intent, and its reason: an
// answer meaning this intent will never be executed (retrying the same request cannot
// succeed, and nothing was allocated). Every other failure (unavailable, not leader,
// insufficient funds, an unknown signer, a transport error, a timeout) is retried later:
// it may pass once funds or configuration arrive, and the requestId keeps a retry from
// paying twice.
func Rejection(err error) (string, bool) {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return "", false
	}
	if v1.IsInvalidArgument(err) || v1.IsIntentReverts(err) || v1.IsIdempotencyConflict(err) || v1.IsRequestTooLarge(err) {
		se := kerrors.FromError(err)
		return fmt.Sprintf("rejected by txmanager: %s: %s", se.Reason, se.Message), true
	}
	return "", false
}

// Backoff is the delay before attempt number attempts+1 of a failed send: base doubled
// per earlier attempt, capped at ceiling.
func Backoff(base, ceiling time.Duration, attempts int) time.Duration {
	d := base
	for range attempts {
		if d >= ceiling/2 {
			return ceiling
		}
		d *= 2
	}
	return min(d, ceiling)
}
