package repositories_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-kratos/kratos/v2/log"

	"github.com/bionicotaku/lingo-utils/pglocal"
	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// pgx's statement cache behind a transaction-mode pooler without prepared-statement support
// (PgBouncer before 1.21, as Debian ships it) fails with an error that names only the
// statement; the service's log says which setting to change.
func TestPreparedStatementFailureBehindAPoolerNamesTheSetting(t *testing.T) {
	if _, err := pglocal.FindPgBouncer(); err != nil {
		pgtest.Unavailable(t, "pgbouncer is needed (apt-get install pgbouncer)", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Two server connections for many clients: transactions of one client move between them.
	bouncer, err := pglocal.StartPgBouncer(ctx, pglocal.PgBouncerOptions{Upstream: pgtest.AdminDSN(t), PoolSize: 2})
	if err != nil {
		t.Fatalf("StartPgBouncer: %v", err)
	}
	t.Cleanup(func() { _ = bouncer.Stop() })

	var logs testsupport.LogBuffer
	logger := log.NewStdLogger(&logs)
	database := conf.Database{DSN: bouncer.DSN("postgres"), MaxConns: 8, QueryExecMode: "cache_statement"}
	watch, err := repositories.NewServerWatch(logger, telemetry.Noop())
	if err != nil {
		t.Fatal(err)
	}
	pool, closePool, err := repositories.NewPool(database, logger, watch, telemetry.Noop())
	if err != nil {
		t.Fatal(err)
	}
	defer closePool()

	var wg sync.WaitGroup
	var failures sync.Map
	for worker := range 8 {
		wg.Go(func() {
			for i := range 50 {
				var n int
				// Different statements, so each client prepares several names.
				query := []string{"SELECT $1::int", "SELECT $1::int + 0", "SELECT $1::int * 1"}[i%3]
				if err := pool.QueryRow(ctx, query, worker).Scan(&n); err != nil {
					failures.Store(err.Error(), true)
				}
			}
		})
	}
	wg.Wait()
	failed := 0
	failures.Range(func(k, _ any) bool { failed++; return true })
	if failed == 0 {
		t.Fatal("no query failed: this PgBouncer keeps prepared statements, so the case the hint is for did not happen")
	}
	if got := logs.String(); !strings.Contains(got, "set database.queryExecMode to exec or simple_protocol") {
		t.Fatalf("%d distinct failures, but the log does not name database.queryExecMode:\n%s", failed, got)
	}
}
