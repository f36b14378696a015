package services

import (
	"context"
	"fmt"
	"strings"

	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/uuid"

	"github.com/bionicotaku/lingo-utils/txmanager"
	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"

	"github.com/bionicotaku/txmanager-examples/payouts/internal/domain"
)

// CompletionApplier turns txmanager's final results into final payout states. It runs as
// a feed.Handler: inside the transaction that also moves the consumer's cursor, so a
// completion is applied exactly once, however often the process dies.
type CompletionApplier struct {
	payouts PayoutRepository
	txm     TxManagerClient
	signer  Signer
	log     *log.Helper
}

// NewCompletionApplier builds the handler.
func NewCompletionApplier(payouts PayoutRepository, txm TxManagerClient, signer Signer, logger log.Logger) *CompletionApplier {
	return &CompletionApplier{payouts: payouts, txm: txm, signer: signer, log: log.NewHelper(log.With(logger, "component", "consumer"))}
}

// Apply is the feed.Handler. Completions of other signers, placeholders (nonce-hole
// fillers nobody asked for) and transactions another service requested are skipped; the
// cursor still moves past them.
func (a *CompletionApplier) Apply(ctx context.Context, sess txmanager.Session, pc *v1.Completion) error {
	if pc.GetPlaceholder() || !strings.EqualFold(pc.GetSigner(), string(a.signer)) {
		return nil
	}
	var confirmed bool
	switch pc.GetStatus() {
	case "CONFIRMED":
		confirmed = true
	case "FAILED_FINAL":
	default:
		return fmt.Errorf("completion of tx %s has status %q, neither CONFIRMED nor FAILED_FINAL", pc.GetTxId(), pc.GetStatus())
	}
	c := domain.Completion{TxID: pc.GetTxId(), Signer: pc.GetSigner(), Confirmed: confirmed, TxHash: pc.GetTxHash(), Cursor: pc.GetCursor()}
	payoutID, ok, err := a.payouts.FinalizeByTxID(ctx, sess, c)
	if err != nil {
		return fmt.Errorf("apply completion of tx %s: %w", c.TxID, err)
	}
	if !ok {
		if payoutID, ok, err = a.finalizeUnrecorded(ctx, sess, c); err != nil || !ok {
			return err
		}
	}
	if err := a.payouts.RecordApplied(ctx, sess, payoutID, c); err != nil {
		return err
	}
	status, _ := c.FinalStatus()
	a.log.Infow("msg", "payout final", "payout_id", payoutID.String(), "tx_id", c.TxID, "status", string(status))
	return nil
}

// finalizeUnrecorded handles a completion whose transaction no payout holds yet: the relay
// sent it and died before recording it. The requestId, read back from txmanager, is the
// outbox row that names the payout.
func (a *CompletionApplier) finalizeUnrecorded(ctx context.Context, sess txmanager.Session, c domain.Completion) (uuid.UUID, bool, error) {
	if _, recorded, err := a.payouts.IDByTxID(ctx, sess, c.TxID); err != nil || recorded {
		// Recorded but already final: nothing left to apply.
		return uuid.Nil, false, err
	}
	tx, err := a.txm.Get(ctx, c.TxID)
	if err != nil {
		return uuid.Nil, false, fmt.Errorf("read tx %s to find its requestId: %w", c.TxID, err)
	}
	outboxID, parseErr := uuid.Parse(tx.GetRequestId())
	if parseErr != nil {
		// Not one of ours: another service pays from the same signer, so nothing to apply.
		return uuid.Nil, false, nil //nolint:nilerr // a foreign requestId is expected, not a failure
	}
	payoutID, ok, err := a.payouts.FinalizeByOutboxID(ctx, sess, outboxID, c)
	if err != nil {
		return uuid.Nil, false, fmt.Errorf("apply completion of tx %s by request %s: %w", c.TxID, outboxID, err)
	}
	return payoutID, ok, nil
}
