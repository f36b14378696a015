package services

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// SubmitAllocated signs the signer's ALLOCATED transactions (lowest nonce first) in
// batches of pipeline.submitBatch, persists every batch's attempts fenced, and only then
// broadcasts them, batch after batch in nonce order, until none is left. While one batch
// is on its way to the node, the next is signed and stored: for a hot signer the node's
// intake, not signing and the database, sets the pace. stored (when not nil) is told each
// batch once its attempts are stored and before any is sent: bytes no node has seen yet.
func (p *Pipeline) SubmitAllocated(ctx context.Context, lease domain.Lease, stored func([]TrackedTx)) (int, error) {
	total := 0
	var sending chan error // the batch on its way to the node; nil when none is
	sent := func() error {
		if sending == nil {
			return nil
		}
		err := <-sending
		sending = nil
		return err
	}
	for ctx.Err() == nil {
		next, err := p.signAndStore(ctx, lease, stored)
		sendErr := sent()
		if len(next) == 0 {
			return total, errors.Join(sendErr, err)
		}
		total += len(next)
		if sendErr != nil || ctx.Err() != nil {
			// The pass ends here (the batch before failed to record its outcome, or the
			// node is stopping), but next is stored: it goes out now rather than leave a
			// gap below every later nonce until its resubmission. When the lease is gone
			// its outcome is the new owner's to learn.
			var fenced *domain.FencedError
			return total, errors.Join(sendErr, p.sendStored(ctx, lease, next, !errors.As(sendErr, &fenced)))
		}
		done := make(chan error, 1)
		go func() { done <- p.sendStored(ctx, lease, next, true) }()
		sending = done
	}
	return total, sent()
}

// storedSendTimeout bounds sending a stored batch, which runs on after its pass's context
// ends (each call to the chain has its own deadline too).
const storedSendTimeout = 30 * time.Second

// signAndStore signs up to a batch of the signer's ALLOCATED transactions and stores their
// attempts fenced (the transactions become TRACKING); nothing is sent.
func (p *Pipeline) signAndStore(ctx context.Context, lease domain.Lease, stored func([]TrackedTx)) ([]SignedAttempt, error) {
	ctx, span := p.span(ctx, "pipeline.sign", lease)
	defer span.End()
	txs, err := p.store.ListAllocated(ctx, lease.Signer, max(p.cfg.SubmitBatch, 1))
	if err != nil || len(txs) == 0 {
		return nil, err
	}
	suggestion, err := p.chain.SuggestFees(ctx)
	if err != nil {
		return nil, &domain.UnavailableError{Reason: "fee suggestion", RetryAfter: time.Second, Err: err}
	}
	attempts := make([]SignedAttempt, 0, len(txs))
	for _, tx := range txs {
		maxFee, maxTip, err := p.cfg.Fees.Initial(tx.Intent, suggestion)
		if err != nil {
			return nil, err
		}
		signed, raw, err := p.sign(ctx, tx.Signer, tx.Nonce, tx.Intent.To, tx.Intent.Value, tx.Intent.Data, tx.EffectiveGasLimit, maxFee, maxTip, suggestion.Legacy)
		if err != nil {
			return nil, fmt.Errorf("sign %s (nonce %d): %w", tx.ID, tx.Nonce, err)
		}
		attempts = append(attempts, SignedAttempt{
			TxID: tx.ID, Hash: signed.Hash(), Nonce: tx.Nonce, Kind: AttemptOriginal,
			MaxFee: maxFee, MaxTip: maxTip, GasLimit: tx.EffectiveGasLimit, Raw: raw,
		})
	}
	if err := p.store.MarkSigned(ctx, lease, attempts, p.cfg.ResubmitInterval); err != nil {
		return nil, p.fenced(ctx, lease, err)
	}
	if stored != nil {
		tracked := make([]TrackedTx, len(attempts))
		for i, a := range attempts {
			tracked[i] = TrackedTx{TxID: a.TxID, Signer: lease.Signer, Nonce: a.Nonce, Attempts: []AttemptRef{{Hash: a.Hash, Kind: a.Kind}}}
		}
		stored(tracked)
	}
	return attempts, nil
}

// sendStored broadcasts stored attempts in nonce order and, when record, records the
// outcomes (fenced). It does not stop with ctx: once stored, the bytes are this signer's
// transactions whoever owns it, and any owner would send exactly these.
func (p *Pipeline) sendStored(ctx context.Context, lease domain.Lease, attempts []SignedAttempt, record bool) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storedSendTimeout)
	defer cancel()
	ctx, span := p.span(ctx, "pipeline.submit", lease)
	defer span.End()
	if !record {
		raws := make([][]byte, len(attempts))
		for i, a := range attempts {
			raws[i] = a.Raw
		}
		_, err := p.chain.SendRawTransactions(ctx, raws)
		return err
	}
	items := make([]broadcastItem, len(attempts))
	for i, a := range attempts {
		items[i] = broadcastItem{TxID: a.TxID, Raw: a.Raw, Ours: []common.Hash{a.Hash}}
	}
	if _, err := p.broadcast(ctx, lease, items); err != nil {
		return err
	}
	p.log.WithContext(ctx).Infow("msg", "transactions signed and broadcast", "signer", lease.Signer, "fencing_token", lease.Token,
		"count", len(attempts), "first_nonce", attempts[0].Nonce, "first_tx_id", attempts[0].TxID.String(), "state", string(domain.StateTracking))
	return nil
}

// ResubmitDue rebroadcasts the signer's transactions whose resubmission is due (not mined
// within resubmit.interval), STUCK ones included. They are claimed first, in one fenced
// statement (advance next_resubmit_at, count the attempt), and only the claimed ones are
// sent, lowest nonce first. Each is re-priced when it pays less than a fresh attempt would
// (FeePolicy.Reprice): the replacement is signed and stored fenced before it is sent;
// otherwise the same signed bytes go out again.
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
	if items, err = p.reprice(ctx, lease, due, items); err != nil {
		return 0, err
	}
	outcomes, err := p.broadcast(ctx, lease, items)
	for _, o := range outcomes {
		p.metrics.Resubmit(ctx, o.Result)
	}
	return len(items), err
}

// reprice replaces the bytes of every item whose fees fall short of the market with a
// re-priced attempt, stored (fenced) as the transaction's current one before anything is
// sent. Without a fee suggestion the items go out as they are: a rebroadcast must not
// wait for the fee oracle.
func (p *Pipeline) reprice(ctx context.Context, lease domain.Lease, due []DueResubmit, items []broadcastItem) ([]broadcastItem, error) {
	suggestion, err := p.chain.SuggestFees(ctx)
	if err != nil {
		p.log.WithContext(ctx).Warnw("msg", "no fee suggestion; rebroadcasting at the current fees", "signer", lease.Signer, "error", err.Error())
		return items, nil
	}
	current := make(map[uuid.UUID]DueResubmit, len(due))
	for _, d := range due {
		current[d.TxID] = d
	}
	var replacements []Replacement
	for _, it := range items {
		d := current[it.TxID]
		maxFee, maxTip, action := p.cfg.Fees.CappedBy(d.IntentMaxFee, d.IntentMaxTip).Reprice(d.MaxFee, d.MaxTip, suggestion)
		switch action {
		case AtFeeCap:
			p.metrics.Reprice(ctx, "at_cap")
			p.log.WithContext(ctx).Warnw("msg", "underpriced, and the fee caps leave no room for a replacement; waiting at the current fees",
				"signer", lease.Signer, "tx_id", it.TxID.String(), "max_fee", d.MaxFee.String(), "base_fee", nonNil(suggestion.BaseFee).String())
			continue
		case KeepFees:
			continue
		}
		attempt, err := p.resign(ctx, d, maxFee, maxTip)
		if err != nil {
			return nil, fmt.Errorf("re-price %s: %w", it.TxID, err)
		}
		replacements = append(replacements, Replacement{Replaced: d.Current, Attempt: attempt})
	}
	if len(replacements) == 0 {
		return items, nil
	}
	stored, err := p.store.RecordReplacements(ctx, lease, replacements)
	if err != nil {
		return nil, p.fenced(ctx, lease, err)
	}
	became := make(map[uuid.UUID]SignedAttempt, len(stored))
	for _, r := range replacements {
		if slices.Contains(stored, r.Attempt.TxID) {
			became[r.Attempt.TxID] = r.Attempt
		}
	}
	for i, it := range items {
		if a, ok := became[it.TxID]; ok {
			items[i].Raw, items[i].Ours = a.Raw, append(slices.Clone(it.Ours), a.Hash)
			p.metrics.Reprice(ctx, "raised")
			p.log.WithContext(ctx).Infow("msg", "transaction re-priced", "signer", lease.Signer, "tx_id", it.TxID.String(), "fencing_token", lease.Token,
				"tx_hash", a.Hash.Hex(), "max_fee", a.MaxFee.String(), "max_tip", a.MaxTip.String())
		}
	}
	return items, nil
}

// resign signs the current attempt's transaction again with new fees: same nonce,
// recipient, value, data and gas, same type (legacy or EIP-1559) and kind.
func (p *Pipeline) resign(ctx context.Context, d DueResubmit, maxFee, maxTip *big.Int) (SignedAttempt, error) {
	var prev types.Transaction
	if err := prev.UnmarshalBinary(d.Raw); err != nil {
		return SignedAttempt{}, fmt.Errorf("decode current attempt: %w", err)
	}
	from, err := types.Sender(types.LatestSignerForChainID(p.chainID.Int), &prev)
	if err != nil {
		return SignedAttempt{}, fmt.Errorf("sender of current attempt: %w", err)
	}
	kind := d.Kind
	if kind == AttemptOriginal {
		kind = AttemptReplace
	}
	signed, raw, err := p.sign(ctx, from, prev.Nonce(), prev.To(), prev.Value(), prev.Data(), prev.Gas(), maxFee, maxTip, prev.Type() == types.LegacyTxType)
	if err != nil {
		return SignedAttempt{}, err
	}
	return SignedAttempt{TxID: d.TxID, Hash: signed.Hash(), Nonce: prev.Nonce(), Kind: kind, MaxFee: maxFee, MaxTip: maxTip, GasLimit: prev.Gas(), Raw: raw}, nil
}
