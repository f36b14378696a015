package services

import (
	"context"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// ReceiptOutcome sorts one look-up pass: what was mined, what the node does not have yet,
// and what could not be looked up.
type ReceiptOutcome struct {
	Found    []FoundReceipt
	NotFound []uuid.UUID
	Failed   []uuid.UUID
}

// CheckReceipts looks up the receipts of every attempt of txs in batched calls (the chain
// adapter packs them into JSON-RPC batches). A receipt for ANY attempt counts: a
// replacement or cancellation may be the one that was mined.
func (p *Pipeline) CheckReceipts(ctx context.Context, txs []TrackedTx) (ReceiptOutcome, error) {
	ctx, span := p.metrics.Tracer.Start(ctx, "pipeline.receipts", trace.WithAttributes(attribute.Int("txs", len(txs))))
	defer span.End()
	var hashes []AttemptRef
	for _, tx := range txs {
		hashes = append(hashes, tx.Attempts...)
	}
	plain := make([]common.Hash, len(hashes))
	for i, h := range hashes {
		plain[i] = h.Hash
	}
	results, err := p.chain.TransactionReceipts(ctx, plain)
	if err != nil {
		for range txs {
			p.metrics.ReceiptCheck(ctx, "error")
		}
		return ReceiptOutcome{}, err
	}
	var out ReceiptOutcome
	i := 0
	for _, tx := range txs {
		var found *FoundReceipt
		failed := false
		for _, attempt := range tx.Attempts {
			r := results[i]
			i++
			switch {
			case r.Receipt != nil && found == nil:
				found = &FoundReceipt{TxID: tx.TxID, Signer: tx.Signer, Kind: attempt.Kind, Receipt: *r.Receipt}
			case r.Err != nil:
				failed = true
			}
		}
		switch {
		case found != nil:
			out.Found = append(out.Found, *found)
			p.metrics.ReceiptCheck(ctx, "found")
		case failed:
			out.Failed = append(out.Failed, tx.TxID)
			p.metrics.ReceiptCheck(ctx, "error")
		default:
			out.NotFound = append(out.NotFound, tx.TxID)
			p.metrics.ReceiptCheck(ctx, "not_found")
		}
	}
	return out, nil
}

// BlockScan is what reading whole blocks' receipts found.
type BlockScan struct {
	Found []FoundReceipt
	// Through is the last block read; blocks after from up to it were all read. When the
	// endpoint did not have the first block yet it is from itself (nothing was read).
	Through uint64
}

// ReceiptsInBlocks reads the receipts of blocks from+1..to (one call per block) and picks
// those of txs' attempts: with many transactions in flight this replaces a look-up per
// hash, which costs the node a search of the whole block each. Reading stops at the first
// block the endpoint does not have. ErrNotSupported: the node has no eth_getBlockReceipts.
func (p *Pipeline) ReceiptsInBlocks(ctx context.Context, txs []TrackedTx, from, to uint64) (BlockScan, error) {
	ctx, span := p.metrics.Tracer.Start(ctx, "pipeline.block_receipts", trace.WithAttributes(attribute.Int("txs", len(txs)), attribute.Int64("blocks", int64(to-from))))
	defer span.End()
	scan := BlockScan{Through: from}
	if to <= from {
		return scan, nil
	}
	numbers := make([]uint64, 0, to-from)
	for n := from + 1; n <= to; n++ {
		numbers = append(numbers, n)
	}
	blocks, err := p.chain.BlockReceipts(ctx, numbers)
	if err != nil {
		return scan, err
	}
	type owner struct {
		tx   *TrackedTx
		kind AttemptKind
	}
	ours := make(map[common.Hash]owner, len(txs))
	for i := range txs {
		for _, a := range txs[i].Attempts {
			ours[a.Hash] = owner{&txs[i], a.Kind}
		}
	}
	found := map[uuid.UUID]bool{}
	for i, receipts := range blocks {
		if receipts == nil {
			break // the endpoint is not at this height yet
		}
		scan.Through = numbers[i]
		for _, r := range receipts {
			if o, ok := ours[r.TxHash]; ok && !found[o.tx.TxID] {
				found[o.tx.TxID] = true
				scan.Found = append(scan.Found, FoundReceipt{TxID: o.tx.TxID, Signer: o.tx.Signer, Kind: o.kind, Receipt: r})
				p.metrics.ReceiptCheck(ctx, "found")
			}
		}
	}
	return scan, nil
}

// RecordReceipts writes found receipts, signer by signer, with the leases this node holds;
// receipts of signers it no longer holds are left for their owner.
func (p *Pipeline) RecordReceipts(ctx context.Context, found []FoundReceipt) (int, error) {
	ctx, span := p.metrics.Tracer.Start(ctx, "pipeline.record_receipts", trace.WithAttributes(attribute.Int("receipts", len(found))))
	defer span.End()
	bySigner := map[string][]FoundReceipt{}
	for _, f := range found {
		bySigner[f.Signer] = append(bySigner[f.Signer], f)
	}
	return writeHeld(ctx, p, bySigner, p.store.RecordReceipts, func(lease domain.Lease, n int, group []FoundReceipt) {
		p.log.WithContext(ctx).Infow("msg", "receipts recorded", "signer", lease.Signer, "fencing_token", lease.Token, "count", n,
			"first_tx_id", group[0].TxID.String(), "sub_state", "MINED")
	})
}

// HeadNumber is the chain's current block number.
func (p *Pipeline) HeadNumber(ctx context.Context) (uint64, error) {
	head, err := p.chain.LatestHeader(ctx)
	if err != nil {
		return 0, err
	}
	return head.Number, nil
}
