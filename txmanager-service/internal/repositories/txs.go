package repositories

import (
	"context"
	"errors"
	"fmt"

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
	return mapOne(row, err, "get tx by id")
}

// GetByRequestID implements services.TxReader.
func (r *TxRepository) GetByRequestID(ctx context.Context, signer common.Address, requestID string) (domain.ManagedTx, error) {
	row, err := r.q.GetTxByRequestID(ctx, sqlcdb.GetTxByRequestIDParams{ChainID: r.chainID, Signer: signer.Hex(), RequestID: pgtype.Text{String: requestID, Valid: true}})
	return mapOne(row, err, "get tx by request id")
}

func mapOne(row sqlcdb.ManagedTx, err error, what string) (domain.ManagedTx, error) {
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.ManagedTx{}, domain.ErrNotFound
	}
	if err != nil {
		return domain.ManagedTx{}, fmt.Errorf("%s: %w", what, err)
	}
	return toDomain(row)
}
