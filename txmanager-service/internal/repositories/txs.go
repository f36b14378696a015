package repositories

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories/sqlcdb"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// TxRepository reads managed transactions; single-row reads need no transaction.
type TxRepository struct{ chainScoped }

// NewTxRepository builds the repository on the pool.
func NewTxRepository(pool *pgxpool.Pool, chain services.ChainID) *TxRepository {
	return &TxRepository{newChainScoped(pool, chain)}
}

// GetByID implements services.TxReader.
func (r *TxRepository) GetByID(ctx context.Context, id uuid.UUID) (domain.ManagedTx, error) {
	row, err := r.q.GetTxByID(ctx, id)
	return mapOne(row.ManagedTx, row.SigningFailingSince, err, "get tx by id")
}

// GetByRequestID implements services.TxReader.
// An intent held for approval, or decided without a transaction, holds its request id as
// an approval request: a create's retry is answered with it, as the writer answers it.
func (r *TxRepository) GetByRequestID(ctx context.Context, signer common.Address, requestID string) (domain.ManagedTx, error) {
	row, err := r.q.GetTxByRequestID(ctx, sqlcdb.GetTxByRequestIDParams{ChainID: r.chainID, Signer: signer.Hex(), RequestID: pgtype.Text{String: requestID, Valid: true}})
	tx, err := mapOne(row.ManagedTx, row.SigningFailingSince, err, "get tx by request id")
	if !errors.Is(err, domain.ErrNotFound) {
		return tx, err
	}
	approvalRow, err := r.q.GetApprovalByRequest(ctx, sqlcdb.GetApprovalByRequestParams{ChainID: r.chainID, Signer: signer.Hex(), RequestID: pgtype.Text{String: requestID, Valid: true}})
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.ManagedTx{}, domain.ErrNotFound
	}
	if err != nil {
		return domain.ManagedTx{}, fmt.Errorf("get approval by request id: %w", err)
	}
	approval, err := approvalOf(approvalRow)
	if err != nil {
		return domain.ManagedTx{}, err
	}
	return approval.AsTx(), nil
}

// HasAdoptable implements services.TxReader.
func (r *TxRepository) HasAdoptable(ctx context.Context, signer common.Address, recoveryKey [32]byte) (bool, error) {
	adoptable, err := r.q.HasUnclaimed(ctx, sqlcdb.HasUnclaimedParams{ChainID: r.chainID, Signer: signer.Hex(), RecoveryKey: recoveryKey[:]})
	if err != nil {
		return false, fmt.Errorf("look for a recovered transaction to adopt: %w", err)
	}
	return adoptable, nil
}

// mapOne reads a transaction row; signingFailingSince is since when its signer's key source
// has failed (nil: it signs).
func mapOne(row sqlcdb.ManagedTx, signingFailingSince *time.Time, err error, what string) (domain.ManagedTx, error) {
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.ManagedTx{}, domain.ErrNotFound
	}
	if err != nil {
		return domain.ManagedTx{}, fmt.Errorf("%s: %w", what, err)
	}
	tx, err := toDomain(row)
	if err == nil && tx.State == domain.StateAllocated && signingFailingSince != nil {
		// Why it does not move: its signer cannot sign. Shown, not stored: the first
		// signature that succeeds ends it for every such transaction at once. The key
		// source's own error names its infrastructure (key ARNs, account ids, resource
		// paths) and is not for everyone who may read the transaction: operators read it
		// in the signer's status, as a refused create's answer says.
		tx.SubState = domain.SubStateSigningFailed
		tx.LastError = fmt.Sprintf("the signer's key source has failed since %s; operators find its error in the signer's status",
			signingFailingSince.UTC().Format(time.RFC3339))
	}
	return tx, err
}
