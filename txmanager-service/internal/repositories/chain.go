package repositories

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/repositories/sqlcdb"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// ChainIdentityRepository implements services.ChainIdentityStore.
type ChainIdentityRepository struct {
	q *sqlcdb.Queries
}

// NewChainIdentityRepository builds the repository on the pool.
func NewChainIdentityRepository(pool *pgxpool.Pool) *ChainIdentityRepository {
	return &ChainIdentityRepository{q: sqlcdb.New(pool)}
}

// Record implements services.ChainIdentityStore.
func (r *ChainIdentityRepository) Record(ctx context.Context, id services.ChainIdentity) error {
	if err := r.q.RecordChainIdentity(ctx, sqlcdb.RecordChainIdentityParams{ChainID: id.ChainID, GenesisHash: id.GenesisHash}); err != nil {
		return fmt.Errorf("record chain identity: %w", err)
	}
	return nil
}

// List implements services.ChainIdentityStore.
func (r *ChainIdentityRepository) List(ctx context.Context) ([]services.ChainIdentity, error) {
	rows, err := r.q.ListChainIdentities(ctx)
	if err != nil {
		return nil, fmt.Errorf("list chain identities: %w", err)
	}
	out := make([]services.ChainIdentity, len(rows))
	for i, row := range rows {
		out[i] = services.ChainIdentity{ChainID: row.ChainID, GenesisHash: row.GenesisHash}
	}
	return out, nil
}
