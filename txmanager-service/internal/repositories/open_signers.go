package repositories

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/repositories/sqlcdb"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// OpenSignerRepository implements services.OpenSignerStore (queries/open_signers.sql).
type OpenSignerRepository struct{ chainScoped }

// NewOpenSignerRepository builds the repository on the pool.
func NewOpenSignerRepository(pool *pgxpool.Pool, chain services.ChainID) *OpenSignerRepository {
	return &OpenSignerRepository{newChainScoped(pool, chain)}
}

// ListOpenSigners implements services.OpenSignerStore.
func (r *OpenSignerRepository) ListOpenSigners(ctx context.Context) ([]services.OpenSigner, error) {
	rows, err := r.q.ListOpenSigners(ctx, r.chainID)
	if err != nil {
		return nil, fmt.Errorf("list open signers: %w", err)
	}
	out := make([]services.OpenSigner, 0, len(rows))
	for _, row := range rows {
		out = append(out, services.OpenSigner{Signer: row.Signer, Owner: row.OwnerNode.String, LeaseLive: row.LeaseLive})
	}
	return out, nil
}

// OldestPendingAges implements services.OpenSignerStore.
func (r *OpenSignerRepository) OldestPendingAges(ctx context.Context, signers []string) (map[string]float64, error) {
	rows, err := r.q.OldestPendingAges(ctx, sqlcdb.OldestPendingAgesParams{ChainID: r.chainID, Signers: signers})
	if err != nil {
		return nil, fmt.Errorf("oldest pending ages: %w", err)
	}
	out := make(map[string]float64, len(rows))
	for _, row := range rows {
		out[row.Signer] = row.AgeSeconds
	}
	return out, nil
}
