package repositories_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/bionicotaku/lingo-utils/txmanager"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// A retirement lets the signer's lease go, and a create that passed the node's roster check
// just before reaches the batch's lease check with the lease gone: it is answered as
// retired, not FENCED. A lease gone for any other signer is still fenced, and a lease held
// reads the roster state as before.
func TestLeaseCheckAnswersALeaseLetGoByRetirementAsRetired(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := context.Background()
	manager := newTestManager(t, pool)
	store := repositories.NewAllocationRepository(testChain())
	leases := repositories.NewLeaseRepository(pool, testChain())

	tests := []struct {
		name        string
		rosterState string // "" for a signer the roster has not met
		released    bool
		wantRetired bool
		wantFenced  bool
	}{
		{"retired, lease let go", "retired", true, true, false},
		{"retiring, lease let go", "retiring", true, true, false},
		{"active, lease lost", "active", true, false, true},
		{"not on the roster, lease lost", "", true, false, true},
		{"retired, lease held", "retired", false, true, false},
		{"active, lease held", "active", false, false, false},
	}
	for i, tt := range tests {
		signer := fmt.Sprintf("0x00000000000000000000000000000000000001%02x", i)
		lease := acquireLease(t, pool, signer, "node-a")
		if tt.rosterState != "" {
			if _, err := pool.Exec(ctx, `INSERT INTO signer_roster (signer, source, state) VALUES ($1, 'keystore', $2)`, signer, tt.rosterState); err != nil {
				t.Fatal(err)
			}
		}
		if tt.released {
			if err := leases.Release(ctx, lease); err != nil {
				t.Fatal(err)
			}
		}
		var state services.CursorState
		err := manager.WithinTx(ctx, txmanager.DefaultOptions(), func(ctx context.Context, sess txmanager.Session) error {
			var err error
			state, err = store.LockLeaseAndReadCursor(ctx, sess, lease, nil)
			return err
		})
		if fenced := errors.Is(err, domain.ErrFenced); fenced != tt.wantFenced || (err != nil && !fenced) {
			t.Errorf("%s: lease check error %v, want fenced %t", tt.name, err, tt.wantFenced)
		}
		if err == nil && state.Retired != tt.wantRetired {
			t.Errorf("%s: retired %t, want %t", tt.name, state.Retired, tt.wantRetired)
		}
	}
}
