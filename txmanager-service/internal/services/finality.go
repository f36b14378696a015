package services

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// FinalityReport counts one pass.
type FinalityReport struct {
	Final    int
	Reorged  int
	Waiting  int
	HeadSeen uint64
}

// AdvanceFinality moves mined transactions of the given signers on: a receipt whose block
// is no longer canonical goes back to TRACKING; one with enough confirmations (or under the
// node's finalized block) becomes CONFIRMED or FAILED_FINAL together with its completion.
//
// The pass judges every transaction against one view of the chain: the head is read once
// and each height's canonical block is fetched once, so two transactions in one block can
// never be judged against different forks.
func (p *Pipeline) AdvanceFinality(ctx context.Context, signers []string) (FinalityReport, error) {
	ctx, span := p.metrics.Tracer.Start(ctx, "pipeline.finality")
	defer span.End()
	var report FinalityReport
	mined, err := p.store.ListMined(ctx, signers)
	if err != nil || len(mined) == 0 {
		return report, err
	}
	head, err := p.chain.LatestHeader(ctx)
	if err != nil {
		return report, fmt.Errorf("head: %w", err)
	}
	report.HeadSeen = head.Number
	finalizedAt := uint64(0)
	if p.cfg.UseFinalizedTag {
		finalized, err := p.chain.FinalizedHeader(ctx)
		if err != nil {
			return report, fmt.Errorf("finalized block: %w", err)
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
		return report, fmt.Errorf("canonical headers: %w", err)
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
		if !ok || block.Hash != tx.BlockHash {
			reorged[tx.Signer] = append(reorged[tx.Signer], tx)
			continue
		}
		confirmations := head.Number - tx.BlockNumber + 1
		isFinal := confirmations >= max(p.cfg.Confirmations, 1)
		if p.cfg.UseFinalizedTag {
			isFinal = tx.BlockNumber <= finalizedAt
		}
		if !isFinal {
			report.Waiting++
			continue
		}
		finals[tx.Signer] = append(finals[tx.Signer], finalization(tx))
	}

	var errs []error
	for signer, txs := range reorged {
		lease, ok := p.leases.Current(signer)
		if !ok {
			continue
		}
		n, err := p.store.RevertReorged(ctx, lease, txs)
		if err != nil {
			errs = append(errs, p.fenced(ctx, lease, err))
			continue
		}
		for range n {
			p.metrics.Reorg(ctx)
		}
		report.Reorged += n
		p.log.WithContext(ctx).Warnw("msg", "receipts left the canonical chain; tracking again", "signer", signer, "fencing_token", lease.Token,
			"count", n, "first_tx_id", txs[0].TxID.String(), "state", string(domain.StateTracking), "sub_state", "REORGED")
	}
	for signer, group := range finals {
		lease, ok := p.leases.Current(signer)
		if !ok {
			continue
		}
		n, err := p.store.Finalize(ctx, lease, group)
		if err != nil {
			errs = append(errs, p.fenced(ctx, lease, err))
			continue
		}
		report.Final += n
		p.log.WithContext(ctx).Infow("msg", "transactions final", "signer", signer, "fencing_token", lease.Token, "count", n,
			"first_tx_id", group[0].Tx.TxID.String(), "first_state", string(group[0].State))
	}
	return report, errors.Join(errs...)
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
