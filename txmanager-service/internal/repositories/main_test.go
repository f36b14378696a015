package repositories_test

import (
	"math/big"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"
	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/ethereum/go-ethereum/common"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/receipts"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testChain is the chain the tests' repositories serve: the embedded chain's id.
func testChain() services.ChainID { return services.ChainID{Int: big.NewInt(1337)} }

// newTestManager is the transaction library's manager on pool, logging errors only.
func newTestManager(t *testing.T, pool *pgxpool.Pool) txmanager.Manager {
	t.Helper()
	component, err := txmanager.NewComponentWithDependencies(txmanager.Config{}, pool, txmanager.Dependencies{Logger: log.NewFilter(log.DefaultLogger, log.FilterLevel(log.LevelError))})
	if err != nil {
		t.Fatal(err)
	}
	return component.Manager
}

// acquireLease takes signer's lease for node, as the node's lease manager would hold it.
func acquireLease(t testing.TB, pool *pgxpool.Pool, signer, node string) domain.Lease {
	t.Helper()
	grant, err := repositories.NewLeaseRepository(pool, testChain()).AcquireOrRenew(t.Context(), signer, node, time.Minute, time.Second)
	if err != nil || !grant.Acquired {
		t.Fatalf("acquire lease: %+v, %v", grant, err)
	}
	return domain.Lease{Signer: signer, Owner: node, Token: grant.Token, ExpiresAt: grant.ExpiresAt}
}

// insertMined inserts a broadcast transaction of lease's signer at nonce whose receipt is
// on record in block 7 (hash block), ready for finality.
func insertMined(t *testing.T, pool *pgxpool.Pool, lease domain.Lease, nonce int, block common.Hash) uuid.UUID {
	t.Helper()
	id := uuid.New()
	if _, err := pool.Exec(t.Context(), `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, sub_state, tx_hash, fencing_token,
		receipt, block_number, block_hash) VALUES (1337, $1, $2, '\x00', $3, '{"value":"0"}', 'TRACKING', 'SIGNED', '0x01', $4, '{"status": 1}', 7, $5)`,
		id, lease.Signer, nonce, int64(lease.Token), block.Hex()); err != nil {
		t.Fatal(err)
	}
	return id
}

// confirmedIn is the finality of ids, mined by lease's signer in block 7 (hash block), as
// CONFIRMED.
func confirmedIn(lease domain.Lease, block common.Hash, ids ...uuid.UUID) []receipts.Finalization {
	finals := make([]receipts.Finalization, 0, len(ids))
	for _, id := range ids {
		finals = append(finals, receipts.Finalization{Tx: receipts.MinedTx{TxID: id, Signer: lease.Signer, BlockNumber: 7, BlockHash: block, Status: 1},
			State: domain.StateConfirmed})
	}
	return finals
}

// runSequencers runs n sequencers, as on n nodes, each a round every few milliseconds,
// until the returned stop is called.
func runSequencers(t *testing.T, sequencer *services.FeedSequencer, n int) (stop func()) {
	t.Helper()
	done := make(chan struct{})
	var running sync.WaitGroup
	for range n {
		running.Go(func() {
			for {
				select {
				case <-done:
					return
				case <-time.After(time.Duration(rand.IntN(5)) * time.Millisecond):
				}
				if _, _, err := sequencer.Round(t.Context()); err != nil {
					t.Errorf("sequencer: %v", err)
					return
				}
			}
		})
	}
	return func() { close(done); running.Wait() }
}

// checkIndexes fails t unless each named index exists (true) or is gone (false).
func checkIndexes(t *testing.T, pool *pgxpool.Pool, want map[string]bool) {
	t.Helper()
	for index, exists := range want {
		var got bool
		if err := pool.QueryRow(t.Context(), "SELECT to_regclass($1) IS NOT NULL", index).Scan(&got); err != nil || got != exists {
			t.Fatalf("index %s exists: %v, %v; want %v", index, got, err, exists)
		}
	}
}

// managedTxUpdates is managed_tx's count of updates and of HOT ones, this backend's own
// flushed first, read until the updates reach atLeast (or 5 s pass): the statistics
// collector publishes them late.
func managedTxUpdates(t testing.TB, pool *pgxpool.Pool, atLeast int64) (updated, hot int64) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := pool.Exec(t.Context(), "SELECT pg_stat_force_next_flush()"); err != nil {
			t.Fatal(err)
		}
		if err := pool.QueryRow(t.Context(), `SELECT n_tup_upd + pg_stat_get_xact_tuples_updated(relid), n_tup_hot_upd + pg_stat_get_xact_tuples_hot_updated(relid)
			FROM pg_stat_user_tables WHERE relname = 'managed_tx'`).Scan(&updated, &hot); err != nil {
			t.Fatal(err)
		}
		if updated >= atLeast || time.Now().After(deadline) {
			return updated, hot
		}
	}
}
