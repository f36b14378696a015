package repositories_test

import (
	"context"
	"testing"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/repositories"
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
	if _, err := pool.Exec(ctx, `INSERT INTO tx_approval (approval_id, chain_id, signer, fingerprint, requester, policy_scope, policy_version, reason, role, required, state, expires_at)
		VALUES ($1, 1337, '0x00000000000000000000000000000000000000a1', '\x01', 'payouts', 'signer:x', 1, 'above 1 ether', 'approver', 1, 'APPROVED', now() + interval '1 second')`, id); err != nil {
		t.Fatal(err)
	}
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
