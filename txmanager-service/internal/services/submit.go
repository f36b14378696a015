package services

import (
	"context"
	"fmt"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// SubmitAllocated signs the signer's ALLOCATED transactions (lowest nonce first), persists
// every attempt fenced, and only then broadcasts them in nonce order.
func (p *Pipeline) SubmitAllocated(ctx context.Context, lease domain.Lease) (int, error) {
	ctx, span := p.span(ctx, "pipeline.submit", lease)
	defer span.End()
	txs, err := p.store.ListAllocated(ctx, lease.Signer, max(p.cfg.SubmitBatch, 1))
	if err != nil || len(txs) == 0 {
		return 0, err
	}
	suggestion, err := p.chain.SuggestFees(ctx)
	if err != nil {
		return 0, &domain.UnavailableError{Reason: "fee suggestion", RetryAfter: time.Second, Err: err}
	}
	attempts := make([]SignedAttempt, 0, len(txs))
	for _, tx := range txs {
		maxFee, maxTip, err := p.cfg.Fees.Initial(tx.Intent, suggestion)
		if err != nil {
			return 0, err
		}
		signed, raw, err := p.sign(ctx, tx.Signer, tx.Nonce, tx.Intent.To, tx.Intent.Value, tx.Intent.Data, tx.EffectiveGasLimit, maxFee, maxTip)
		if err != nil {
			return 0, fmt.Errorf("sign %s (nonce %d): %w", tx.ID, tx.Nonce, err)
		}
		attempts = append(attempts, SignedAttempt{
			TxID: tx.ID, Hash: signed.Hash(), Nonce: tx.Nonce, Kind: AttemptOriginal,
			MaxFee: maxFee, MaxTip: maxTip, GasLimit: tx.EffectiveGasLimit, Raw: raw,
		})
	}
	if err := p.store.MarkSigned(ctx, lease, attempts, p.cfg.ResubmitInterval); err != nil {
		return 0, p.fenced(ctx, lease, err)
	}
	items := make([]broadcastItem, len(attempts))
	for i, a := range attempts {
		items[i] = broadcastItem{TxID: a.TxID, Raw: a.Raw, Ours: []common.Hash{a.Hash}}
	}
	if _, err := p.broadcast(ctx, lease, items); err != nil {
		return 0, err
	}
	p.log.WithContext(ctx).Infow("msg", "transactions signed and broadcast", "signer", lease.Signer, "fencing_token", lease.Token,
		"count", len(attempts), "first_nonce", attempts[0].Nonce, "first_tx_id", attempts[0].TxID.String(), "state", string(domain.StateTracking))
	return len(attempts), nil
}

// ResubmitDue rebroadcasts the signer's transactions whose resubmission is due. They are
// claimed first, in one fenced statement (advance next_resubmit_at, count the attempt), and
// only the claimed ones are sent, with the same signed bytes, lowest nonce first.
func (p *Pipeline) ResubmitDue(ctx context.Context, lease domain.Lease, limit int) (int, error) {
	ctx, span := p.span(ctx, "pipeline.resubmit", lease)
	defer span.End()
	due, err := p.store.ListResubmitDue(ctx, lease.Signer, limit)
	if err != nil {
		return 0, err
	}
	if len(due) == 0 {
		return 0, nil
	}
	ids := make([]uuid.UUID, len(due))
	for i, d := range due {
		ids[i] = d.TxID
	}
	claimedIDs, err := p.store.ClaimResubmits(ctx, lease, ids, p.cfg.ResubmitInterval)
	if err != nil {
		return 0, p.fenced(ctx, lease, err)
	}
	claimed := make(map[uuid.UUID]bool, len(claimedIDs))
	for _, id := range claimedIDs {
		claimed[id] = true
	}
	var items []broadcastItem
	for _, d := range due {
		if claimed[d.TxID] {
			items = append(items, broadcastItem{TxID: d.TxID, Raw: d.Raw, Ours: d.AllHashes})
		}
	}
	if len(items) == 0 {
		return 0, nil
	}
	outcomes, err := p.broadcast(ctx, lease, items)
	for _, o := range outcomes {
		p.metrics.Resubmit(ctx, o.Result)
	}
	return len(items), err
}
