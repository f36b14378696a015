package repositories_test

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// The idempotency look-up finds a signer's transactions by request id on its own chain
// only, once each however often an id repeats in the batch, and nothing for ids it does
// not hold. The lease check of the batch counts the same ids, so a batch without a retry
// skips the look-up.
func TestFindByRequestIDsFindsEachOfTheSignersOnce(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := context.Background()
	signer := common.HexToAddress("0x00000000000000000000000000000000000000d1")
	other := common.HexToAddress("0x00000000000000000000000000000000000000d2")
	ids := map[string]uuid.UUID{}
	insert := func(chainID int64, who common.Address, nonce int, requestID string) {
		id := uuid.New()
		if _, err := pool.Exec(ctx, `INSERT INTO managed_tx (chain_id, tx_id, signer, request_id, intent_hash, nonce, payload, state, fencing_token)
			VALUES ($1, $2, $3, $4, '\x00', $5, '{"value":"0"}', 'ALLOCATED', 1)`, chainID, id, who.Hex(), requestID, nonce); err != nil {
			t.Fatal(err)
		}
		ids[who.Hex()+"/"+requestID] = id
	}
	insert(1337, signer, 0, "r1")
	insert(1337, signer, 1, "r2")
	insert(1337, other, 0, "r3")
	insert(99, signer, 0, "r4")

	lease := acquireLease(t, pool, signer.Hex(), "node-a")
	manager := newTestManager(t, pool)
	store := repositories.NewAllocationRepository(testChain())
	tests := []struct {
		name       string
		requestIDs []string
		want       []string
	}{
		{"one", []string{"r1"}, []string{"r1"}},
		{"two, one repeated", []string{"r1", "r2", "r1"}, []string{"r1", "r2"}},
		{"another signer's", []string{"r3"}, nil},
		{"the signer's on another chain", []string{"r4"}, nil},
		{"unknown beside a known one", []string{"nope", "r2"}, []string{"r2"}},
		{"none asked", nil, nil},
	}
	for _, tt := range tests {
		var found map[string]domain.ManagedTx
		err := manager.WithinReadOnlyTx(ctx, txmanager.DefaultOptions(), func(ctx context.Context, sess txmanager.Session) error {
			var err error
			found, err = store.FindByRequestIDs(ctx, sess, signer, tt.requestIDs)
			return err
		})
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		var state services.CursorState
		err = manager.WithinTx(ctx, txmanager.DefaultOptions(), func(ctx context.Context, sess txmanager.Session) error {
			var err error
			state, err = store.LockLeaseAndReadCursor(ctx, sess, lease, tt.requestIDs)
			return err
		})
		if err != nil || state.KnownRequests != len(tt.want) {
			t.Errorf("%s: the lease check counted %d known request ids, %v; want %d", tt.name, state.KnownRequests, err, len(tt.want))
		}
		if got := slices.Sorted(maps.Keys(found)); !slices.Equal(got, tt.want) {
			t.Errorf("%s: found %v, want %v", tt.name, got, tt.want)
			continue
		}
		for requestID, tx := range found {
			if tx.ID != ids[signer.Hex()+"/"+requestID] {
				t.Errorf("%s: %s found as %s, want %s", tt.name, requestID, tx.ID, ids[signer.Hex()+"/"+requestID])
			}
		}
	}
}
