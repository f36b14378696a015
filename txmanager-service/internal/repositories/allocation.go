package repositories

import (
	"context"
	"errors"
	"fmt"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories/sqlcdb"
)

// AllocationRepository implements services.AllocationStore on the batch's session.
type AllocationRepository struct{}

// NewAllocationRepository builds the repository.
func NewAllocationRepository() *AllocationRepository { return &AllocationRepository{} }

// LockLeaseAndReadCursor implements services.AllocationStore.
func (AllocationRepository) LockLeaseAndReadCursor(ctx context.Context, sess txmanager.Session, lease domain.Lease) (*uint64, error) {
	signer, node, token := leaseArgs(lease)
	row, err := sqlcdb.New(sess.DB()).LockLeaseAndReadCursor(ctx, sqlcdb.LockLeaseAndReadCursorParams{Signer: signer, NodeID: node, FencingToken: token})
	if err := fencedResult(lease, "lease check", 1, err); err != nil {
		return nil, err
	}
	if !row.NextNonce.Valid {
		return nil, nil
	}
	next := uint64(row.NextNonce.Int64)
	return &next, nil
}

// FindByRequestIDs implements services.AllocationStore.
func (AllocationRepository) FindByRequestIDs(ctx context.Context, sess txmanager.Session, signer common.Address, requestIDs []string) (map[string]domain.ManagedTx, error) {
	rows, err := sqlcdb.New(sess.DB()).FindTxsByRequestIDs(ctx, sqlcdb.FindTxsByRequestIDsParams{Signer: signer.Hex(), RequestIds: requestIDs})
	if err != nil {
		return nil, fmt.Errorf("find by request ids: %w", err)
	}
	out := make(map[string]domain.ManagedTx, len(rows))
	for _, row := range rows {
		tx, err := toDomain(row)
		if err != nil {
			return nil, err
		}
		out[tx.RequestID] = tx
	}
	return out, nil
}

// InsertAllocated implements services.AllocationStore: one fenced statement for the whole
// signer batch.
func (AllocationRepository) InsertAllocated(ctx context.Context, sess txmanager.Session, lease domain.Lease, txs []domain.ManagedTx) error {
	params := sqlcdb.InsertManagedTxsParams{
		TxIds:        make([]uuid.UUID, len(txs)),
		RequestIds:   make([]string, len(txs)),
		IntentHashes: make([][]byte, len(txs)),
		Nonces:       make([]int64, len(txs)),
		Payloads:     make([][]byte, len(txs)),
	}
	params.Signer, params.NodeID, params.FencingToken = leaseArgs(lease)
	// One timestamp for the batch, the one the callers were answered with.
	params.CreatedAt = txs[0].CreatedAt
	for i, tx := range txs {
		payload, err := encodePayload(tx)
		if err != nil {
			return fmt.Errorf("encode payload: %w", err)
		}
		params.TxIds[i] = tx.ID
		params.RequestIds[i] = tx.RequestID
		params.IntentHashes[i] = tx.Fingerprint[:]
		params.Nonces[i] = int64(tx.Nonce)
		params.Payloads[i] = payload
	}
	rows, err := sqlcdb.New(sess.DB()).InsertManagedTxs(ctx, params)
	if err := fencedResult(lease, "managed_tx insert", rows, err); err != nil {
		return err
	}
	if rows != int64(len(txs)) {
		return fmt.Errorf("managed_tx insert wrote %d of %d rows", rows, len(txs))
	}
	return nil
}

// AdvanceCursor implements services.AllocationStore.
func (AllocationRepository) AdvanceCursor(ctx context.Context, sess txmanager.Session, lease domain.Lease, next uint64) error {
	signer, node, token := leaseArgs(lease)
	_, err := sqlcdb.New(sess.DB()).AdvanceNonceCursor(ctx, sqlcdb.AdvanceNonceCursorParams{
		Signer: signer, NodeID: node, FencingToken: token, NextNonce: int64(next),
	})
	if errors.Is(err, pgx.ErrNoRows) {
		// Either fenced or the cursor is already ahead (which max(chain, cache, db) rules
		// out while we hold the lease); both mean this batch must not commit.
		return fencedResult(lease, "nonce cursor", 0, nil)
	}
	return err
}
