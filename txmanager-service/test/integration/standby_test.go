package integration

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bionicotaku/lingo-utils/pglocal"
	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"

	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// An answer from the database is given only once what it tells of is on the database's
// synchronous standby. A commit whose wait for the standby was cut short (its connection's
// deadline, a cancel) stays committed and visible on the primary, and so does one made with
// synchronous_commit off; a failover loses them. A retried create answered from such a
// transaction acknowledges one that is then lost (make chaos-db's deep-lag failover found
// this), and a feed page serving its completion hands out a position that a later
// completion takes again. Here the standby is one the server is told to wait for and that
// never connects, so no commit is confirmed.
func TestAnswersWaitForTheStandby(t *testing.T) {
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
	s := startService(t, serviceOptions{dsn: dsn, fastPipeline: true})
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
	signer := devAddress(t, 0)
	payload := map[string]any{"signer": signer, "to": devAddress(t, 1), "value": "1", "gasLimit": 21000, "requestId": "standby-1"}
	id := s.createOK(t, payload)
	if final := s.pageCompletions(t, 1); final[id] == "" {
		t.Fatalf("the feed's first completion is not %s: %v", id, final)
	}
	reads := []struct {
		name   string
		answer func() apiResponse
		// reason is the refusal while no standby confirms.
		reason string
	}{
		{"retried create", func() apiResponse { return s.create(t, payload) }, "OUTCOME_UNKNOWN"},
		{"transaction by id", func() apiResponse { return s.do(t, http.MethodGet, "/api/v1/tx/"+id, nil) }, "UNAVAILABLE"},
		{"transaction by request", func() apiResponse {
			return s.do(t, http.MethodGet, "/api/v1/tx/by-request?signer="+signer+"&requestId=standby-1", nil)
		}, "UNAVAILABLE"},
		{"completions page", func() apiResponse { return s.do(t, http.MethodGet, "/api/v1/tx/completions", nil) }, "UNAVAILABLE"},
	}

	standby("absent")
	for _, r := range reads {
		started := time.Now()
		got := r.answer()
		if got.status != http.StatusServiceUnavailable || got.reason() != r.reason {
			t.Errorf("%s while no standby confirms: %d %s, want 503 %s", r.name, got.status, got.raw, r.reason)
		}
		if waited := time.Since(started); waited > 10*time.Second {
			t.Errorf("%s was answered after %v: its wait for the standby is bounded", r.name, waited)
		}
		if got.status == http.StatusServiceUnavailable && r.reason == "UNAVAILABLE" && got.retryAfter == "" {
			t.Errorf("%s: 503 without Retry-After", r.name)
		}
	}

	standby("")
	for _, r := range reads {
		got := r.answer()
		if got.status != http.StatusOK || !strings.Contains(got.raw, id) {
			t.Errorf("%s once commits are confirmed again: %d %s, want 200 with %s", r.name, got.status, got.raw, id)
		}
	}
}
