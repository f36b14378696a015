package repositories_test

import (
	"context"
	"testing"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// An approval that expires while a writer batch waits (for another batch's locks) is not
// admitted by it: its expiry is judged by the clock when the batch locks it, not at the
// batch's start.
func TestAnApprovalExpiredWhileTheBatchWaitedIsNotAdmitted(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := t.Context()
	id := uuid.New()
	insertApproved(t, pool, id, time.Second)
	allocations := repositories.NewAllocationRepository(testChain())
	err := newTestManager(t, pool).WithinTx(ctx, txmanager.DefaultOptions(), func(ctx context.Context, sess txmanager.Session) error {
		// The batch's transaction started before the expiry, and the lock comes after it.
		if _, err := sess.DB().Exec(ctx, `SELECT pg_sleep(1.5)`); err != nil {
			return err
		}
		granted, err := allocations.LockApproved(ctx, sess, []uuid.UUID{id})
		if err == nil && len(granted) != 0 {
			t.Errorf("an approval past its expiry granted: %+v", granted)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The admission pass pages through the approved intents in order of expiry: a page read
// after the one before goes on from it, so approvals held back for now (a paused signer,
// funds) do not fill every page.
func TestApprovedIntentsArePagedInOrderOfExpiry(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := t.Context()
	ids := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
	for i, id := range ids {
		insertApproved(t, pool, id, time.Duration(i+1)*time.Hour)
	}
	approvals := repositories.NewApprovalRepository(pool)
	var seen []uuid.UUID
	after := services.ApprovalPosition{}
	for page := range 3 {
		got, err := approvals.ApprovedToAdmit(ctx, 1337, after, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range got {
			seen = append(seen, a.ID)
		}
		if len(got) < 2 {
			if page != 1 {
				t.Fatalf("a short page at page %d, want at the second", page)
			}
			break
		}
		after = services.ApprovalPosition{ExpiresAt: got[len(got)-1].ExpiresAt, ID: got[len(got)-1].ID}
	}
	if len(seen) != 3 || seen[0] != ids[0] || seen[1] != ids[1] || seen[2] != ids[2] {
		t.Fatalf("paged %v, want %v in order of expiry, each once", seen, ids)
	}
}

// insertApproved records an approved intent of chain 1337 that expires after expiresIn.
func insertApproved(t *testing.T, pool *pgxpool.Pool, id uuid.UUID, expiresIn time.Duration) {
	t.Helper()
	if _, err := pool.Exec(t.Context(), `INSERT INTO tx_approval (approval_id, chain_id, signer, fingerprint, requester, policy_scope, policy_version, reason, role, required, state, expires_at)
		VALUES ($1, 1337, '0x00000000000000000000000000000000000000a1', '\x01', 'payouts', 'signer:x', 1, 'above 1 ether', 'approver', 1, 'APPROVED', now() + make_interval(secs => $2))`,
		id, expiresIn.Seconds()); err != nil {
		t.Fatal(err)
	}
}
