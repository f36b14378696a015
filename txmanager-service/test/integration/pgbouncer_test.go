package integration

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bionicotaku/lingo-utils/pglocal"
	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// The service behind PgBouncer in transaction mode, as Supabase's transaction pooler runs
// it: creates, confirmations, idempotency, the completions feed and nonce allocation under
// load work with each pooler-safe query exec mode. Migrations use the direct connection.
//
// exec and simple_protocol are the modes configs recommend behind a pooler. pgx also
// documents cache_describe as PgBouncer-compatible (it caches descriptions, never named
// statements); it is here to tell a PgBouncer problem from an exec-mode one.
func TestServiceThroughPgBouncerInTransactionMode(t *testing.T) {
	if _, err := pglocal.FindPgBouncer(); err != nil {
		pgtest.Unavailable(t, "pgbouncer is needed (apt-get install pgbouncer)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bouncer, err := pglocal.StartPgBouncer(ctx, pglocal.PgBouncerOptions{Upstream: pgtest.AdminDSN(t)})
	if err != nil {
		t.Fatalf("StartPgBouncer: %v", err)
	}
	t.Cleanup(func() {
		if err := bouncer.Stop(); err != nil {
			t.Errorf("stop pgbouncer: %v", err)
		}
	})

	for _, mode := range []string{"exec", "simple_protocol", "cache_describe"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			direct := testsupport.MigratedDSN(t)
			database := databaseName(t, direct)
			// The service pools through PgBouncer; the test's own pool (s.pool) is direct.
			s := startService(t, serviceOptions{dsn: direct, chainQuery: true, fastPipeline: true, configure: func(bc *conf.Bootstrap) {
				bc.Database.DSN = bouncer.DSN(database)
				bc.Database.MigrationDSN = direct
				bc.Database.QueryExecMode = mode
				bc.Chain.Embedded.BlockInterval = conf.Duration(250 * time.Millisecond)
			}})
			recipient := devAddress(t, 9)

			t.Run("idempotency", func(t *testing.T) {
				signer := devAddress(t, 2)
				payload := map[string]any{"signer": signer, "to": recipient, "value": "777", "gasLimit": 21000, "requestId": "pooled-1"}
				answers := createConcurrently(t, s, 30, 30, func(int) map[string]any { return payload })
				requireStatus(t, answers, http.StatusAccepted, http.StatusOK)
				requireOneTxID(t, answers)
				if n := s.count(t, "SELECT count(*) FROM managed_tx WHERE signer = $1 AND request_id = 'pooled-1'", signer); n != 1 {
					t.Fatalf("managed_tx rows = %d, want 1", n)
				}
				conflict := s.create(t, map[string]any{"signer": signer, "to": recipient, "value": "778", "gasLimit": 21000, "requestId": "pooled-1"})
				if conflict.status != http.StatusConflict || conflict.reason() != "IDEMPOTENCY_CONFLICT" {
					t.Fatalf("different intent: %d %s, want 409 IDEMPOTENCY_CONFLICT", conflict.status, conflict.raw)
				}
				if n := s.count(t, "SELECT next_nonce FROM signer_nonce_cursor WHERE signer = $1", signer); n != 1 {
					t.Fatalf("cursor = %d, want 1: replays and conflicts consume no nonce", n)
				}
			})

			t.Run("writer batches give contiguous nonces", func(t *testing.T) {
				signer := devAddress(t, 3)
				const total = 300
				answers := createConcurrently(t, s, total, 100, func(i int) map[string]any {
					return map[string]any{"signer": signer, "to": recipient, "value": strconv.Itoa(i + 1), "gasLimit": 21000}
				})
				requireStatus(t, answers, http.StatusAccepted)
				nonces := make([]uint64, total)
				for i, a := range answers {
					n, err := strconv.ParseUint(a.tx()["nonce"].(string), 10, 64)
					if err != nil {
						t.Fatalf("create %d: nonce %v: %v", i, a.tx()["nonce"], err)
					}
					nonces[i] = n
				}
				requireContiguousNonces(t, nonces)
				if n := s.count(t, "SELECT next_nonce FROM signer_nonce_cursor WHERE signer = $1", signer); n != total {
					t.Fatalf("cursor = %d, want %d", n, total)
				}
			})

			t.Run("transactions are confirmed", func(t *testing.T) {
				signers := []string{devAddress(t, 0), devAddress(t, 1)}
				answers := createConcurrently(t, s, 50, 50, func(i int) map[string]any {
					return map[string]any{"signer": signers[i%2], "to": recipient, "value": fmt.Sprint(1000 + i), "gasLimit": 21000}
				})
				requireStatus(t, answers, http.StatusAccepted)
				// Everything this service created, the earlier subtests' included, ends final.
				waitFor(t, 45*time.Second, "every transaction final", func() bool {
					return s.count(t, "SELECT count(*) FROM managed_tx WHERE state NOT IN ('CONFIRMED', 'FAILED_FINAL')") == 0
				})
				for _, a := range answers {
					id := a.tx()["txId"].(string)
					if r := s.tx(t, id); r.state != "CONFIRMED" {
						t.Fatalf("tx %s ended %s/%s, want CONFIRMED", id, r.state, r.subState)
					}
				}
				if n := s.count(t, "SELECT count(*) FROM managed_tx WHERE state <> 'CONFIRMED'"); n != 0 {
					t.Fatalf("%d transactions did not end CONFIRMED", n)
				}
			})

			t.Run("completions feed serves every final tx once", func(t *testing.T) {
				final := int(s.count(t, "SELECT count(*) FROM managed_tx WHERE state IN ('CONFIRMED', 'FAILED_FINAL')"))
				total := int(s.count(t, "SELECT count(*) FROM managed_tx"))
				if total == 0 {
					t.Fatal("no transaction was created: nothing for the feed to serve")
				}
				if final != total {
					t.Fatalf("%d of %d transactions final; the feed check needs all of them", final, total)
				}
				if seen := s.pageCompletions(t, final); len(seen) != final {
					t.Fatalf("feed served %d completions, want %d", len(seen), final)
				}
			})

			t.Run("the service went through pgbouncer", func(t *testing.T) {
				pools := showFor(t, bouncer, "POOLS", database)
				if len(pools) != 1 || pools[0]["pool_mode"] != "transaction" {
					t.Fatalf("SHOW POOLS for %s: %v, want one pool in transaction mode", database, pools)
				}
				if clients := showFor(t, bouncer, "CLIENTS", database); len(clients) == 0 {
					t.Fatalf("SHOW CLIENTS lists no client of %s: the service is not connected through pgbouncer", database)
				}
				// Every create, lease renewal and pipeline pass is a transaction; a service
				// that reached the database some other way would leave pgbouncer few to count.
				stats := showFor(t, bouncer, "STATS", database)
				if len(stats) != 1 {
					t.Fatalf("SHOW STATS for %s: %v", database, stats)
				}
				if n, _ := strconv.Atoi(stats[0]["total_xact_count"]); n < 100 {
					t.Fatalf("pgbouncer pooled %d transactions for %s, want at least 100", n, database)
				}
				// And the server sees it from its side: the backends pgbouncer holds open are
				// sessions on this database.
				var pids []int32
				for _, server := range showFor(t, bouncer, "SERVERS", database) {
					pid, err := strconv.ParseInt(server["remote_pid"], 10, 32)
					if err != nil {
						t.Fatalf("SHOW SERVERS remote_pid %q: %v", server["remote_pid"], err)
					}
					if pid == 0 {
						continue // still logging in: the server has no backend for it yet
					}
					pids = append(pids, int32(pid))
				}
				if n := s.count(t, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid = ANY($1)", pids); n == 0 || n != int64(len(pids)) {
					t.Fatalf("pg_stat_activity shows %d of pgbouncer's %d server connections (pids %v) on %s", n, len(pids), pids, database)
				}
			})
		})
	}
}

// showFor is SHOW <what> on the pgbouncer admin console, restricted to one database.
func showFor(t *testing.T, bouncer *pglocal.PgBouncer, what, database string) []map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := bouncer.Show(ctx, what)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]string
	for _, r := range rows {
		if r["database"] == database {
			out = append(out, r)
		}
	}
	return out
}

func databaseName(t *testing.T, dsn string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Database
}
