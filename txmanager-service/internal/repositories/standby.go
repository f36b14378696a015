package repositories

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/repositories/sqlcdb"
)

// StandbyRepository implements services.StandbyBarrier on the pool (AwaitStandby in
// queries/tx.sql).
type StandbyRepository struct{ q *sqlcdb.Queries }

// NewStandbyRepository builds the repository on the pool.
func NewStandbyRepository(pool *pgxpool.Pool) *StandbyRepository {
	return &StandbyRepository{q: sqlcdb.New(pool)}
}

// AwaitStandby implements services.StandbyBarrier.
func (r *StandbyRepository) AwaitStandby(ctx context.Context) error {
	if err := r.q.AwaitStandby(ctx); err != nil {
		return fmt.Errorf("wait for the standby: %w", err)
	}
	return nil
}
