package repositories

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories/sqlcdb"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// RecoveryRepository implements services.ChainCheckStore.
type RecoveryRepository struct {
	q       *sqlcdb.Queries
	chainID int64
}

// NewRecoveryRepository builds the repository on the pool.
func NewRecoveryRepository(pool *pgxpool.Pool, chain services.ChainID) *RecoveryRepository {
	return &RecoveryRepository{q: sqlcdb.New(pool), chainID: chain.Int64()}
}

var _ services.ChainCheckStore = (*RecoveryRepository)(nil)

// SignerChainCheck implements services.ChainCheckStore.
func (r *RecoveryRepository) SignerChainCheck(ctx context.Context, signer string) (int64, bool, error) {
	row, err := r.q.SignerChainCheck(ctx, sqlcdb.SignerChainCheckParams{ChainID: r.chainID, Signer: signer})
	if err != nil {
		return 0, false, fmt.Errorf("signer chain check: %w", err)
	}
	return row.NextNonce, row.Quarantined, nil
}

// Quarantine implements services.ChainCheckStore.
func (r *RecoveryRepository) Quarantine(ctx context.Context, lease domain.Lease, dbNext, chainNext uint64) (bool, error) {
	return quarantine(ctx, r.q, r.chainID, lease, dbNext, chainNext)
}

// ListNonceTaken implements services.ChainCheckStore.
func (r *RecoveryRepository) ListNonceTaken(ctx context.Context, signer string, limit int) ([]domain.ManagedTx, error) {
	rows, err := r.q.ListNonceTaken(ctx, sqlcdb.ListNonceTakenParams{ChainID: r.chainID, Signer: signer, MaxRows: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("list nonce taken: %w", err)
	}
	out := make([]domain.ManagedTx, 0, len(rows))
	for _, row := range rows {
		tx, err := toDomain(row)
		if err != nil {
			return nil, err
		}
		out = append(out, tx)
	}
	return out, nil
}

// FailNonceTaken implements services.ChainCheckStore.
func (r *RecoveryRepository) FailNonceTaken(ctx context.Context, lease domain.Lease, tx domain.ManagedTx, reason string) error {
	p := sqlcdb.FailNonceTakenParams{TxID: tx.ID, Reason: text(reason)}
	p.Signer, p.NodeID, p.FencingToken = leaseArgs(lease)
	p.ChainID = r.chainID
	row, err := r.q.FailNonceTaken(ctx, p)
	_, err = fencedOutcome(lease, "nonce taken", row.LeaseHeld, row.Updated, err)
	return err
}
