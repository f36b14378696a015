package repositories_test

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// Resubmission claims work in every query exec mode, including exec and simple_protocol,
// which the service uses behind a transaction pooler and where pgx must encode every
// parameter without a described statement: only due transactions are claimed, a claim is
// not repeated before the interval, and a claim under a lost lease is FENCED.
func TestClaimResubmitsInEveryExecMode(t *testing.T) {
	t.Parallel()
	modes := []pgx.QueryExecMode{
		pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec,
		pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol,
	}
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			pool := testsupport.MigratedPool(t, func(c *pgxpool.Config) { c.ConnConfig.DefaultQueryExecMode = mode })
			ctx := t.Context()
			const signer = "0x00000000000000000000000000000000000000aa"
			grant, err := repositories.NewLeaseRepository(pool, testChain()).AcquireOrRenew(ctx, signer, "node-a", time.Minute, time.Second)
			if err != nil || !grant.Acquired {
				t.Fatalf("acquire lease: %+v, %v", grant, err)
			}
			lease := domain.Lease{Signer: signer, Owner: "node-a", Token: grant.Token, ExpiresAt: grant.ExpiresAt}
			due, notDue := uuid.New(), uuid.New()
			if _, err := pool.Exec(ctx, `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, fencing_token, next_resubmit_at)
				VALUES (1337, $1, $3, '\x00', 0, '{"value":"0"}', 'TRACKING', $4, now() - interval '1 second'),
				       (1337, $2, $3, '\x00', 1, '{"value":"0"}', 'TRACKING', $4, now() + interval '1 hour')`,
				due, notDue, signer, int64(grant.Token)); err != nil {
				t.Fatal(err)
			}
			repo := repositories.NewSubmittingRepository(pool, testChain())

			claimed, err := repo.ClaimResubmits(ctx, lease, []uuid.UUID{due, notDue}, time.Minute)
			if err != nil || !slices.Equal(claimed, []uuid.UUID{due}) {
				t.Fatalf("first claim = %v, %v; want only the due transaction %s", claimed, err, due)
			}
			again, err := repo.ClaimResubmits(ctx, lease, []uuid.UUID{due, notDue}, time.Minute)
			if err != nil || len(again) != 0 {
				t.Fatalf("second claim = %v, %v; want nothing until the interval has passed", again, err)
			}
			var attempts int
			if err := pool.QueryRow(ctx, "SELECT submit_attempts FROM managed_tx WHERE tx_id = $1", due).Scan(&attempts); err != nil || attempts != 1 {
				t.Fatalf("submit_attempts = %d, %v; want 1", attempts, err)
			}

			stale := lease
			stale.Token++
			if _, err := repo.ClaimResubmits(ctx, stale, []uuid.UUID{due}, time.Minute); !errors.Is(err, domain.ErrFenced) {
				t.Fatalf("claim with a token that is not the lease's: %v, want FENCED", err)
			}
		})
	}
}
