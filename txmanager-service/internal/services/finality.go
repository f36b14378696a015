package services

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// AdvanceFinality moves mined transactions of the given signers on: a receipt whose block
// is no longer canonical goes back to TRACKING; one with enough confirmations (or under the
// node's finalized block) becomes CONFIRMED or FAILED_FINAL together with its completion.
// It returns how many went back to TRACKING.
//
// The pass judges every transaction against one view of the chain: the head is read once
// and each height's canonical block is fetched once, so two transactions in one block can
// never be judged against different forks.
func (p *Pipeline) AdvanceFinality(ctx context.Context, signers []string) (int, error) {
	ctx, span := p.metrics.Tracer.Start(ctx, "pipeline.finality")
	defer span.End()
	mined, err := p.store.ListMined(ctx, signers)
	if err != nil || len(mined) == 0 {
		return 0, err
	}
	head, err := p.chain.LatestHeader(ctx)
	if err != nil {
		return 0, fmt.Errorf("head: %w", err)
	}
	finalizedAt := uint64(0)
	if p.cfg.UseFinalizedTag {
		finalized, err := p.chain.FinalizedHeader(ctx)
		if err != nil {
			return 0, fmt.Errorf("finalized block: %w", err)
		}
		finalizedAt = finalized.Number
	}

	var heights []uint64
	for _, tx := range mined {
		if tx.BlockNumber <= head.Number {
			heights = append(heights, tx.BlockNumber)
		}
	}
	slices.Sort(heights)
	heights = slices.Compact(heights)
	headers, err := p.chain.HeadersByNumber(ctx, heights)
	if err != nil {
		return 0, fmt.Errorf("canonical headers: %w", err)
	}
	canonical := make(map[uint64]BlockHeader, len(headers))
	for i, h := range headers {
		if h != nil {
			canonical[heights[i]] = *h
		}
	}

	reorged := map[string][]MinedTx{}
	finals := map[string][]Finalization{}
	for _, tx := range mined {
		block, ok := canonical[tx.BlockNumber]
		switch {
		case !ok:
			// Above the head this view reached, or a header the endpoint did not serve: an
			// endpoint lagging behind the one that gave the receipt (a load balancer over
			// backends at different heights) is not a reorg. Judged on a later pass.
			continue
		case block.Hash != tx.BlockHash:
			// A header is only served by an endpoint that has that height, so a different
			// hash there is the chain having moved on without this block.
			reorged[tx.Signer] = append(reorged[tx.Signer], tx)
			continue
		}
		confirmations := head.Number - tx.BlockNumber + 1
		isFinal := confirmations >= max(p.cfg.Confirmations, 1)
		if p.cfg.UseFinalizedTag {
			isFinal = tx.BlockNumber <= finalizedAt
		}
		if isFinal {
			finals[tx.Signer] = append(finals[tx.Signer], finalization(tx))
		}
	}

	reverted, revertErr := writeHeld(ctx, p, reorged, p.store.RevertReorged, func(lease domain.Lease, n int, txs []MinedTx) {
		for range n {
			p.metrics.Reorg(ctx)
		}
		p.log.WithContext(ctx).Warnw("msg", "receipts left the canonical chain; tracking again", "signer", lease.Signer, "fencing_token", lease.Token,
			"count", n, "first_tx_id", txs[0].TxID.String(), "state", string(domain.StateTracking), "sub_state", "REORGED")
	})
	_, finalizeErr := writeHeld(ctx, p, finals, p.store.Finalize, func(lease domain.Lease, n int, group []Finalization) {
		p.log.WithContext(ctx).Infow("msg", "transactions final", "signer", lease.Signer, "fencing_token", lease.Token, "count", n,
			"first_tx_id", group[0].Tx.TxID.String(), "first_state", string(group[0].State))
	})
	return reverted, errors.Join(revertErr, finalizeErr)
}

// writeHeld writes each signer's group with the lease this node holds for that signer, and
// leaves the groups of signers it no longer holds to their owner. A fenced write drops the
// lease; written runs after each successful write. It returns the rows written and every
// failure.
func writeHeld[T any](ctx context.Context, p *Pipeline, groups map[string][]T,
	write func(context.Context, domain.Lease, []T) (int, error), written func(domain.Lease, int, []T)) (int, error) {
	total := 0
	var errs []error
	for signer, group := range groups {
		lease, ok := p.leases.Current(signer)
		if !ok {
			continue
		}
		n, err := write(ctx, lease, group)
		if err != nil {
			errs = append(errs, p.fenced(ctx, lease, err))
			continue
		}
		total += n
		written(lease, n, group)
	}
	return total, errors.Join(errs...)
}

// finalization decides the final state from the receipt status and which attempt was mined.
func finalization(tx MinedTx) Finalization {
	switch {
	case !tx.Kind.ExecutesIntent():
		return Finalization{Tx: tx, State: domain.StateFailedFinal, SubState: SubStateCancelled}
	case tx.Status == 1:
		return Finalization{Tx: tx, State: domain.StateConfirmed}
	default:
		return Finalization{Tx: tx, State: domain.StateFailedFinal, SubState: SubStateReverted}
	}
}
