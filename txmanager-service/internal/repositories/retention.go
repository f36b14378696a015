package repositories

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/repositories/sqlcdb"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// RetentionRepository implements services.RetentionStore.
type RetentionRepository struct {
	q *sqlcdb.Queries
}

// NewRetentionRepository builds the repository on the pool.
func NewRetentionRepository(pool *pgxpool.Pool) *RetentionRepository {
	return &RetentionRepository{q: sqlcdb.New(pool)}
}

// PruneBatch implements services.RetentionStore.
func (r *RetentionRepository) PruneBatch(ctx context.Context, horizon time.Duration, batch int) (services.Pruned, error) {
	row, err := r.q.PruneFinal(ctx, sqlcdb.PruneFinalParams{HorizonSeconds: horizon.Seconds(), BatchSize: int32(batch)})
	if err != nil {
		return services.Pruned{}, fmt.Errorf("prune final transactions: %w", err)
	}
	return services.Pruned{Transactions: int(row.Transactions), Attempts: int(row.Attempts), Completions: int(row.Completions),
		Through: services.FeedPosition(row.PrunedThrough)}, nil
}

// PruneEvents implements services.RetentionStore.
func (r *RetentionRepository) PruneEvents(ctx context.Context, horizon time.Duration, batch int) (int, error) {
	n, err := r.q.PruneEvents(ctx, sqlcdb.PruneEventsParams{HorizonSeconds: horizon.Seconds(), BatchSize: int32(batch)})
	if err != nil {
		return 0, fmt.Errorf("prune service events: %w", err)
	}
	return int(n), nil
}
