package repositories

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories/sqlcdb"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// LeaseRepository implements services.LeaseStore. Each call is one autocommitted statement:
// acquireOrRenew is atomic on its own.
type LeaseRepository struct{ chainScoped }

// NewLeaseRepository builds the repository on the pool.
func NewLeaseRepository(pool *pgxpool.Pool, chain services.ChainID) *LeaseRepository {
	return &LeaseRepository{newChainScoped(pool, chain)}
}

// AcquireOrRenew implements services.LeaseStore.
func (r *LeaseRepository) AcquireOrRenew(ctx context.Context, signer, node string, duration, skew time.Duration) (services.LeaseGrant, error) {
	params := sqlcdb.AcquireOrRenewLeaseParams{ChainID: r.chainID, Signer: signer, NodeID: node, DurationSeconds: duration.Seconds(), SkewSeconds: skew.Seconds()}
	row, err := r.q.AcquireOrRenewLease(ctx, params)
	for attempt := 0; errors.Is(err, pgx.ErrNoRows) && attempt < 3; attempt++ {
		// Two nodes created the signer's first lease at once: ours lost the insert race and
		// its statement's snapshot predates the winner's row. A new statement sees it.
		row, err = r.q.AcquireOrRenewLease(ctx, params)
	}
	if err != nil {
		return services.LeaseGrant{}, fmt.Errorf("acquire lease %s: %w", signer, err)
	}
	return services.LeaseGrant{
		Signer:    row.Signer,
		Owner:     row.OwnerNode,
		Token:     uint64(row.FencingToken),
		ExpiresAt: row.ExpiresAt,
		DBNow:     row.DbNow,
		Acquired:  row.Acquired,
	}, nil
}

// Renew implements services.LeaseStore.
func (r *LeaseRepository) Renew(ctx context.Context, node string, signers []string, duration time.Duration) ([]services.LeaseGrant, error) {
	rows, err := r.q.RenewLeases(ctx, sqlcdb.RenewLeasesParams{ChainID: r.chainID, NodeID: node, Signers: signers, DurationSeconds: duration.Seconds()})
	if err != nil {
		return nil, fmt.Errorf("renew %d leases: %w", len(signers), err)
	}
	out := make([]services.LeaseGrant, len(rows))
	for i, row := range rows {
		out[i] = services.LeaseGrant{Signer: row.Signer, Owner: node, Token: uint64(row.FencingToken), ExpiresAt: row.ExpiresAt, DBNow: row.DbNow, Acquired: true}
	}
	return out, nil
}

// Release implements services.LeaseStore.
func (r *LeaseRepository) Release(ctx context.Context, lease domain.Lease) error {
	signer, node, token := leaseArgs(lease)
	if _, err := r.q.ReleaseLease(ctx, sqlcdb.ReleaseLeaseParams{ChainID: r.chainID, Signer: signer, NodeID: node, FencingToken: token}); err != nil {
		return fmt.Errorf("release lease %s: %w", signer, err)
	}
	return nil
}
