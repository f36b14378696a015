package repositories

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/ethereum/go-ethereum/common"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/receipts"
	"github.com/bionicotaku/txmanager-service/internal/repositories/sqlcdb"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// ReceiptRepository implements receipts.Store (queries/receipts.sql): receipts and
// finality. Each write is one autocommitted, fenced statement.
type ReceiptRepository struct{ chainScoped }

// NewReceiptRepository builds the repository on the pool.
func NewReceiptRepository(pool *pgxpool.Pool, chain services.ChainID) *ReceiptRepository {
	return &ReceiptRepository{newChainScoped(pool, chain)}
}

// ListAwaitingReceipt implements receipts.Store.
func (r *ReceiptRepository) ListAwaitingReceipt(ctx context.Context, signers []string) ([]pipeline.TrackedTx, error) {
	rows, err := r.q.ListAwaitingReceipt(ctx, sqlcdb.ListAwaitingReceiptParams{ChainID: r.chainID, Signers: signers})
	if err != nil {
		return nil, fmt.Errorf("list awaiting receipt: %w", err)
	}
	out := make([]pipeline.TrackedTx, 0, len(rows))
	for _, row := range rows {
		t := pipeline.TrackedTx{TxID: row.TxID, Signer: row.Signer, Nonce: uint64(row.Nonce), Attempts: make([]pipeline.AttemptRef, len(row.AttemptHashes))}
		for i, h := range row.AttemptHashes {
			t.Attempts[i] = pipeline.AttemptRef{Hash: common.HexToHash(h), Kind: pipeline.AttemptKind(row.AttemptKinds[i])}
		}
		out = append(out, t)
	}
	return out, nil
}

// RecordReceipts implements receipts.Store.
func (r *ReceiptRepository) RecordReceipts(ctx context.Context, lease domain.Lease, found []receipts.FoundReceipt) (int, error) {
	var p sqlcdb.RecordReceiptsParams
	p.Signer, p.NodeID, p.FencingToken = leaseArgs(lease)
	p.ChainID = r.chainID
	for _, f := range found {
		payload, err := json.Marshal(payloadOf(f))
		if err != nil {
			return 0, err
		}
		p.TxIds = append(p.TxIds, f.TxID.String())
		p.TxHashes = append(p.TxHashes, f.Receipt.TxHash.Hex())
		p.Receipts = append(p.Receipts, string(payload))
		p.BlockNumbers = append(p.BlockNumbers, int64(f.Receipt.BlockNumber))
		p.BlockHashes = append(p.BlockHashes, f.Receipt.BlockHash.Hex())
	}
	row, err := r.q.RecordReceipts(ctx, p)
	return fencedOutcome(lease, "receipts", row.LeaseHeld, row.Updated, err)
}

// ListMined implements receipts.Store.
func (r *ReceiptRepository) ListMined(ctx context.Context, signers []string) ([]receipts.MinedTx, error) {
	rows, err := r.q.ListMined(ctx, sqlcdb.ListMinedParams{ChainID: r.chainID, Signers: signers})
	if err != nil {
		return nil, fmt.Errorf("list mined: %w", err)
	}
	out := make([]receipts.MinedTx, 0, len(rows))
	for _, row := range rows {
		mined := receipts.MinedTx{
			TxID: row.TxID, Signer: row.Signer, Nonce: uint64(row.Nonce),
			BlockNumber: uint64(row.BlockNumber.Int64), BlockHash: common.HexToHash(row.BlockHash.String),
			Status: uint64(row.ReceiptStatus), Kind: pipeline.AttemptKind(row.ReceiptKind),
			Cost: domain.ReceiptSummary{GasUsed: uint64(row.GasUsed)},
		}
		if mined.Cost.EffectiveGasPrice, mined.Cost.L1Fee, err = decodeCost(row.EffectiveGasPrice, row.L1Fee); err != nil {
			return nil, fmt.Errorf("list mined: receipt of %s: %w", row.TxID, err)
		}
		out = append(out, mined)
	}
	return out, nil
}

// RevertReorged implements receipts.Store.
func (r *ReceiptRepository) RevertReorged(ctx context.Context, lease domain.Lease, txs []receipts.MinedTx) (int, error) {
	var p sqlcdb.RevertReorgedParams
	p.Signer, p.NodeID, p.FencingToken = leaseArgs(lease)
	p.ChainID = r.chainID
	for _, t := range txs {
		p.TxIds = append(p.TxIds, t.TxID.String())
		p.BlockHashes = append(p.BlockHashes, t.BlockHash.Hex())
	}
	row, err := r.q.RevertReorged(ctx, p)
	return fencedOutcome(lease, "reorg revert", row.LeaseHeld, row.Updated, err)
}

// Finalize implements receipts.Store.
func (r *ReceiptRepository) Finalize(ctx context.Context, lease domain.Lease, finals []receipts.Finalization) (int, error) {
	var p sqlcdb.FinalizeTxsParams
	p.Signer, p.NodeID, p.FencingToken = leaseArgs(lease)
	p.ChainID = r.chainID
	for _, f := range finals {
		p.TxIds = append(p.TxIds, f.Tx.TxID.String())
		p.BlockHashes = append(p.BlockHashes, f.Tx.BlockHash.Hex())
		p.States = append(p.States, string(f.State))
		p.SubStates = append(p.SubStates, string(f.SubState))
		receipt, txHash, blockNumber := "", "", int64(0)
		if held := f.Tx.Held; held != nil {
			payload, err := json.Marshal(payloadOf(*held))
			if err != nil {
				return 0, err
			}
			receipt, txHash, blockNumber = string(payload), held.Receipt.TxHash.Hex(), int64(held.Receipt.BlockNumber)
		}
		p.Receipts = append(p.Receipts, receipt)
		p.TxHashes = append(p.TxHashes, txHash)
		p.BlockNumbers = append(p.BlockNumbers, blockNumber)
	}
	row, err := r.q.FinalizeTxs(ctx, p)
	return fencedOutcome(lease, "finality", row.LeaseHeld, row.Updated, err)
}

// payloadOf is the receipt document stored for f.
func payloadOf(f receipts.FoundReceipt) receiptPayload {
	p := receiptPayload{
		TxHash: f.Receipt.TxHash.Hex(), Status: f.Receipt.Status, BlockNumber: f.Receipt.BlockNumber,
		BlockHash: f.Receipt.BlockHash.Hex(), GasUsed: f.Receipt.GasUsed, Kind: string(f.Kind),
	}
	if f.Receipt.EffectiveGasPrice != nil {
		p.EffectiveGasPrice = f.Receipt.EffectiveGasPrice.String()
	}
	if f.Receipt.L1Fee != nil {
		p.L1Fee = f.Receipt.L1Fee.String()
	}
	return p
}
