package integration

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/bionicotaku/lingo-utils/pglocal"
	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"

	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// A retried create is answered from the transaction on record only once that transaction
// is on the database's synchronous standby. A create whose commit timed out waiting for
// the standby is answered OUTCOME_UNKNOWN, yet PostgreSQL keeps it on the primary, where
// its retry finds it: answering that retry at once would acknowledge a transaction that a
// failover loses (make chaos-db's deep-lag failover found this). Here the standby is one
// the server is told to wait for and that never connects, so no commit is confirmed.
func TestReplayWaitsForTheStandby(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cluster, err := pglocal.StartCluster(ctx, pglocal.ClusterOptions{Settings: []string{"synchronous_commit=on"}})
	if err != nil {
		pgtest.Unavailable(t, "the standby test starts a PostgreSQL cluster of its own from the installed server binaries (apt-get install postgresql)", err)
	}
	t.Cleanup(func() { _ = cluster.Stop() })
	dsn := pglocal.WithDatabase(cluster.DSN, "txm")
	if err := pglocal.CreateDatabase(ctx, cluster.DSN, "txm", "template1"); err != nil {
		t.Fatal(err)
	}
	if err := testsupport.Migrate(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	s := startService(t, serviceOptions{dsn: dsn})
	standby := func(names string) {
		t.Helper()
		if _, err := s.pool.Exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = '"+names+"'"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.pool.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "synchronous_standby_names = '"+names+"'", func() bool {
			var got string
			// A new session reads the reloaded file.
			conn, err := s.pool.Acquire(ctx)
			if err != nil {
				return false
			}
			defer conn.Release()
			return conn.QueryRow(ctx, "SHOW synchronous_standby_names").Scan(&got) == nil && got == names
		})
	}
	payload := map[string]any{"signer": devAddress(t, 0), "to": devAddress(t, 1), "value": "1", "gasLimit": 21000, "requestId": "standby-1"}
	id := s.createOK(t, payload)

	standby("absent")
	started := time.Now()
	waiting := s.create(t, payload)
	if waiting.status != http.StatusServiceUnavailable || waiting.reason() != "OUTCOME_UNKNOWN" {
		t.Errorf("retry while no standby confirms: %d %s, want 503 OUTCOME_UNKNOWN", waiting.status, waiting.raw)
	}
	if waited := time.Since(started); waited > 10*time.Second {
		t.Errorf("the retry was answered after %v: its wait for the standby is bounded", waited)
	}

	standby("")
	replay := s.create(t, payload)
	if replay.status != http.StatusOK || replay.tx()["txId"] != id {
		t.Errorf("retry once commits are confirmed again: %d %s, want 200 with %s", replay.status, replay.raw, id)
	}
}
