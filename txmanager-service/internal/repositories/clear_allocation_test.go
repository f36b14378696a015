package repositories_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// The one-statement allocation writes a signer's part only when the full path (lease check,
// then WriteAllocation) would write the same; each condition the full path acts on alone
// turns that signer away, having written nothing for it, so the batch can take the full path
// for it in the same transaction. Each case shares its statement with a neighbour signer
// whose gate is clear: the neighbour is written whatever happens to the other, and the other
// is judged on its own lease, cursor and rows alone.
func TestClearAllocationsWriteEachSignerOnItsOwnGate(t *testing.T) {
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
		{name: "the request id on record for another signer: written", wantClear: true, requestIDs: []string{"elsewhere"},
			prepare: func(t *testing.T, _ string, _ *domain.Lease) {
				exec(t, `INSERT INTO managed_tx (chain_id, tx_id, signer, request_id, intent_hash, nonce, payload, state, fencing_token)
				VALUES (1337, $1, $2, 'elsewhere', '\x00', 1, '{"value":"0"}', 'ALLOCATED', 1)`, uuid.New(), common.HexToAddress("0xe15e").Hex())
			}},
		{name: "the lease of another node", prepare: func(t *testing.T, _ string, lease *domain.Lease) {
			lease.Owner = "node-b"
		}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			signer := common.HexToAddress(fmt.Sprintf("0x%040x", 0xc1ea0+i)).Hex()
			neighbour := common.HexToAddress(fmt.Sprintf("0x%040x", 0xe1ea0+i)).Hex()
			lease := acquireLease(t, pool, signer, "node-a")
			neighbourLease := acquireLease(t, pool, neighbour, "node-a")
			exec(t, `INSERT INTO signer_nonce_cursor (chain_id, signer, next_nonce, fencing_token) VALUES (1337, $1, $2, $3)`, signer, cursor, lease.Token)
			exec(t, `INSERT INTO signer_nonce_cursor (chain_id, signer, next_nonce, fencing_token) VALUES (1337, $1, $2, $3)`, neighbour, cursor, neighbourLease.Token)
			if tt.prepare != nil {
				tt.prepare(t, signer, &lease)
			}
			if lease.Owner != neighbourLease.Owner {
				// One node's batch: the neighbour's lease is taken by the same node as the case's.
				exec(t, `UPDATE signer_lease SET owner_node = $2 WHERE chain_id = 1337 AND signer = $1`, neighbour, lease.Owner)
				neighbourLease.Owner = lease.Owner
			}
			rowsBefore, cursorBefore := signerRows(t, pool, signer)
			txs := clearBatch(signer, lease, cursor, max(2, len(tt.requestIDs)))
			for i, id := range tt.requestIDs {
				txs[i].RequestID = id
			}
			// The neighbour's request ids are the case's own: request ids are per signer.
			neighbourTxs := clearBatch(neighbour, neighbourLease, cursor, len(txs))
			for i, id := range tt.requestIDs {
				neighbourTxs[i].RequestID = id
			}
			var written []bool
			err := manager.WithinTx(ctx, txmanager.DefaultOptions(), func(ctx context.Context, sess txmanager.Session) error {
				var err error
				written, err = store.WriteClearAllocations(ctx, sess, []services.ClearAllocation{
					{Lease: neighbourLease, Txs: neighbourTxs, ExpectedNext: cursor, Next: cursor + uint64(len(neighbourTxs))},
					{Lease: lease, Txs: txs, ExpectedNext: cursor, Next: cursor + uint64(len(txs))},
				})
				return err
			})
			if err != nil {
				t.Fatalf("WriteClearAllocations: %v", err)
			}
			if want := []bool{true, tt.wantClear}; !slices.Equal(written, want) {
				t.Fatalf("written (neighbour, signer) = %v, want %v", written, want)
			}
			rowsAfter, cursorAfter := signerRows(t, pool, signer)
			wantRows, wantCursor := rowsBefore, cursorBefore
			if tt.wantClear {
				wantRows, wantCursor = rowsBefore+len(txs), fmt.Sprint(cursor+len(txs))
			}
			if rowsAfter != wantRows || cursorAfter != wantCursor {
				t.Errorf("after the call: %d rows and cursor %s, want %d rows and cursor %s", rowsAfter, cursorAfter, wantRows, wantCursor)
			}
			if rows, cursorNow := signerRows(t, pool, neighbour); rows != len(neighbourTxs) || cursorNow != fmt.Sprint(cursor+len(neighbourTxs)) {
				t.Errorf("the neighbour after the call: %d rows and cursor %s, want %d rows and cursor %d", rows, cursorNow, len(neighbourTxs), cursor+len(neighbourTxs))
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

// The batch allocation keeps a generic plan: after PostgreSQL's five custom plans of a
// prepared statement, a generic one costed no higher is kept and the statement is no longer
// planned at each call. Planned afresh, this statement costs about 0.5 ms to plan against
// 0.15 ms to run; a version whose request-id check ran inside each signer's gate looked
// quadratic to the generic plan's estimates, was planned at every call, and spent 288 ms of a
// bench-chain run planning.
func TestClearAllocationsKeepAGenericPlan(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t, func(c *pgxpool.Config) { c.MaxConns = 1 }) // one session: its prepared statements
	ctx := context.Background()
	manager := newTestManager(t, pool)
	store := repositories.NewAllocationRepository(testChain())
	const signers, rows, calls = 5, 6, 12
	parts := make([]services.ClearAllocation, signers)
	for i := range parts {
		signer := common.HexToAddress(fmt.Sprintf("0x%040x", 0x9e0e0+i)).Hex()
		parts[i].Lease = acquireLease(t, pool, signer, "node-a")
		if _, err := pool.Exec(ctx, `INSERT INTO signer_nonce_cursor (chain_id, signer, next_nonce, fencing_token) VALUES (1337, $1, 0, $2)`, signer, parts[i].Lease.Token); err != nil {
			t.Fatal(err)
		}
	}
	for call := range calls {
		for i := range parts {
			parts[i].ExpectedNext = uint64(call * rows)
			parts[i].Next = parts[i].ExpectedNext + rows
			parts[i].Txs = clearBatch(parts[i].Lease.Signer, parts[i].Lease, parts[i].ExpectedNext, rows)
			for j := range parts[i].Txs {
				parts[i].Txs[j].RequestID = fmt.Sprintf("call-%d-%d", call, j)
			}
		}
		err := manager.WithinTx(ctx, txmanager.DefaultOptions(), func(ctx context.Context, sess txmanager.Session) error {
			written, err := store.WriteClearAllocations(ctx, sess, parts)
			if err == nil && slices.Contains(written, false) {
				err = fmt.Errorf("written %v, want every part", written)
			}
			return err
		})
		if err != nil {
			t.Fatalf("call %d: %v", call, err)
		}
	}
	var generic, custom int64
	if err := pool.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements
		WHERE statement LIKE '%name: WriteClearAllocations %'`).Scan(&generic, &custom); err != nil {
		t.Fatalf("the statement's plans: %v", err)
	}
	if generic == 0 {
		t.Fatalf("%d calls ran %d custom plans and no generic one: the statement is planned at every call", calls, custom)
	}
}
