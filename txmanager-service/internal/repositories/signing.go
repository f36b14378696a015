package repositories

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories/sqlcdb"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// SigningRepository implements services.SigningHealthStore and services.SignerConditionStore
// (queries/signing.sql).
type SigningRepository struct{ chainScoped }

// NewSigningRepository builds the repository on the pool.
func NewSigningRepository(pool *pgxpool.Pool, chain services.ChainID) *SigningRepository {
	return &SigningRepository{newChainScoped(pool, chain)}
}

// RecordSigningHealth implements services.SigningHealthStore.
func (r *SigningRepository) RecordSigningHealth(ctx context.Context, lease domain.Lease, failingSince *time.Time, lastError string) (bool, error) {
	p := sqlcdb.RecordSigningHealthParams{Failed: failingSince != nil, LastError: lastError}
	if failingSince != nil {
		p.FailingSince = *failingSince
	}
	p.Signer, p.NodeID, p.FencingToken = leaseArgs(lease)
	p.ChainID = r.chainID
	row, err := r.q.RecordSigningHealth(ctx, p)
	_, err = fencedOutcome(lease, "signing health", row.LeaseHeld, row.Recorded, err)
	return row.WasFailing && err == nil, err
}

// UnsignedBacklog implements services.SigningHealthStore.
func (r *SigningRepository) UnsignedBacklog(ctx context.Context, signer string) (int, error) {
	n, err := r.q.UnsignedBacklog(ctx, sqlcdb.UnsignedBacklogParams{ChainID: r.chainID, Signer: signer})
	if err != nil {
		return 0, fmt.Errorf("unsigned backlog: %w", err)
	}
	return int(n), nil
}

// SignerConditions implements services.SignerConditionStore.
func (r *SigningRepository) SignerConditions(ctx context.Context) ([]services.SignerCondition, error) {
	rows, err := r.q.SignerConditions(ctx, r.chainID)
	if err != nil {
		return nil, fmt.Errorf("signer conditions: %w", err)
	}
	out := make([]services.SignerCondition, 0, len(rows))
	for _, row := range rows {
		out = append(out, services.SignerCondition{
			Signer: row.Signer, Quarantined: row.Quarantined, UnrecordedNonces: uint64(max(row.UnrecordedNonces, 0)), ReleaseRequested: row.ReleaseRequested,
			SigningFailingSince: row.SigningFailingSince, SigningError: row.SigningError,
			Unsigned: int(row.Unsigned), OldestUnsignedAgeSeconds: row.OldestUnsignedAgeSeconds,
		})
	}
	return out, nil
}
