package repositories_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// The one-statement allocation writes only when the full path (lease check, then
// WriteAllocation) would write the same; each condition the full path acts on alone turns
// it away, having written nothing, so the batch can take the full path in the same
// transaction.
func TestClearAllocationWritesOnlyWhatTheFullPathWould(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := context.Background()
	manager := newTestManager(t, pool)
	store := repositories.NewAllocationRepository(testChain())
	const cursor = 5

	exec := func(t *testing.T, sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	tests := []struct {
		name string
		// prepare changes the signer's state after its lease and cursor (at 5) are set.
		prepare    func(t *testing.T, signer string, lease *domain.Lease)
		requestIDs []string
		wantClear  bool
	}{
		{name: "nothing to settle: written", wantClear: true},
		{name: "an active roster row: written", wantClear: true, prepare: func(t *testing.T, signer string, _ *domain.Lease) {
			exec(t, `INSERT INTO signer_roster (signer, source, state) VALUES ($1, 'config', 'active')`, signer)
		}},
		{name: "new request ids: written", wantClear: true, requestIDs: []string{"new-1", "new-2"}},
		{name: "the cursor ahead of the cache", prepare: func(t *testing.T, signer string, _ *domain.Lease) {
			exec(t, `UPDATE signer_nonce_cursor SET next_nonce = $2 WHERE chain_id = 1337 AND signer = $1`, signer, cursor+1)
		}},
		{name: "the cursor behind the cache (a standby that missed commits)", prepare: func(t *testing.T, signer string, _ *domain.Lease) {
			exec(t, `UPDATE signer_nonce_cursor SET next_nonce = $2 WHERE chain_id = 1337 AND signer = $1`, signer, cursor-1)
		}},
		{name: "no cursor yet", prepare: func(t *testing.T, signer string, _ *domain.Lease) {
			exec(t, `DELETE FROM signer_nonce_cursor WHERE chain_id = 1337 AND signer = $1`, signer)
		}},
		{name: "the lease under another token", prepare: func(t *testing.T, _ string, lease *domain.Lease) {
			lease.Token++
		}},
		{name: "the lease expired", prepare: func(t *testing.T, signer string, _ *domain.Lease) {
			exec(t, `UPDATE signer_lease SET expires_at = now() - interval '1 second' WHERE chain_id = 1337 AND signer = $1`, signer)
		}},
		{name: "quarantined", prepare: func(t *testing.T, signer string, lease *domain.Lease) {
			exec(t, `INSERT INTO signer_quarantine (chain_id, signer, db_next_nonce, chain_nonce, detected_by, fencing_token) VALUES (1337, $1, 5, 9, 'node-a', $2)`, signer, lease.Token)
		}},
		{name: "a recovered transaction a create may adopt", prepare: func(t *testing.T, signer string, _ *domain.Lease) {
			exec(t, `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, fencing_token, unclaimed_until)
				VALUES (1337, $1, $2, '\x00', 2, '{"value":"0"}', 'TRACKING', 1, now() + interval '1 hour')`, uuid.New(), signer)
		}},
		{name: "a request id on record (a retry)", requestIDs: []string{"new-1", "known"}, prepare: func(t *testing.T, signer string, _ *domain.Lease) {
			exec(t, `INSERT INTO managed_tx (chain_id, tx_id, signer, request_id, intent_hash, nonce, payload, state, fencing_token)
				VALUES (1337, $1, $2, 'known', '\x00', 1, '{"value":"0"}', 'ALLOCATED', 1)`, uuid.New(), signer)
		}},
		{name: "retiring in the roster", prepare: func(t *testing.T, signer string, _ *domain.Lease) {
			exec(t, `INSERT INTO signer_roster (signer, source, state, retiring_at) VALUES ($1, 'config', 'retiring', now())`, signer)
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			signer := common.HexToAddress(fmt.Sprintf("0x%040x", 0xc1ea0+i)).Hex()
			lease := acquireLease(t, pool, signer, "node-a")
			exec(t, `INSERT INTO signer_nonce_cursor (chain_id, signer, next_nonce, fencing_token) VALUES (1337, $1, $2, $3)`, signer, cursor, lease.Token)
			if tt.prepare != nil {
				tt.prepare(t, signer, &lease)
			}
			rowsBefore, cursorBefore := signerRows(t, pool, signer)
			txs := clearBatch(signer, lease, cursor, 2)
			var clear bool
			err := manager.WithinTx(ctx, txmanager.DefaultOptions(), func(ctx context.Context, sess txmanager.Session) error {
				var err error
				clear, err = store.WriteClearAllocation(ctx, sess, lease, tt.requestIDs, txs, cursor, cursor+uint64(len(txs)))
				return err
			})
			if err != nil {
				t.Fatalf("WriteClearAllocation: %v", err)
			}
			rowsAfter, cursorAfter := signerRows(t, pool, signer)
			if clear != tt.wantClear {
				t.Fatalf("clear = %v, want %v", clear, tt.wantClear)
			}
			wantRows, wantCursor := rowsBefore, cursorBefore
			if tt.wantClear {
				wantRows, wantCursor = rowsBefore+len(txs), fmt.Sprint(cursor+len(txs))
			}
			if rowsAfter != wantRows || cursorAfter != wantCursor {
				t.Errorf("after the call: %d rows and cursor %s, want %d rows and cursor %s", rowsAfter, cursorAfter, wantRows, wantCursor)
			}
		})
	}
}

// clearBatch is n new transactions of lease's signer numbered from first.
func clearBatch(signer string, lease domain.Lease, first uint64, n int) []domain.ManagedTx {
	now := time.Now().UTC().Truncate(time.Microsecond)
	to := common.HexToAddress("0x00000000000000000000000000000000000000e1")
	txs := make([]domain.ManagedTx, n)
	for i := range txs {
		txs[i] = domain.ManagedTx{ID: uuid.Must(uuid.NewV7()), ChainID: 1337, Signer: common.HexToAddress(signer), SignerHex: signer,
			Nonce: first + uint64(i), State: domain.StateAllocated, FencingToken: lease.Token, CreatedAt: now, UpdatedAt: now,
			Intent: domain.Intent{To: &to, GasLimit: 21000}}
	}
	return txs
}

// signerRows counts the signer's transactions and reads its cursor ("none" without one).
func signerRows(t *testing.T, pool *pgxpool.Pool, signer string) (int, string) {
	t.Helper()
	var rows int
	var cursor string
	err := pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM managed_tx WHERE chain_id = 1337 AND signer = $1),
		COALESCE((SELECT next_nonce::text FROM signer_nonce_cursor WHERE chain_id = 1337 AND signer = $1), 'none')`, signer).Scan(&rows, &cursor)
	if err != nil {
		t.Fatal(err)
	}
	return rows, cursor
}
