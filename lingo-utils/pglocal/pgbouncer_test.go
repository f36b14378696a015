package pglocal_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bionicotaku/lingo-utils/pglocal"
	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// requirePgBouncer fails without pgbouncer (make test installs it) unless SKIP_DB_TESTS=1.
func requirePgBouncer(t *testing.T) {
	t.Helper()
	if _, err := pglocal.FindPgBouncer(); err != nil {
		pgtest.Unavailable(t, "pgbouncer is needed (apt-get install pgbouncer)", err)
	}
}

// In transaction mode a server backend belongs to a client only for one transaction: a
// backend one client used is handed to another client's transaction, while the first
// client's next statement runs on a different backend. In session mode neither can happen.
func TestPgBouncerPoolsTransactions(t *testing.T) {
	requirePgBouncer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	database := pgtest.NewDatabase(t)
	bouncer, err := pglocal.StartPgBouncer(ctx, pglocal.PgBouncerOptions{Upstream: pgtest.AdminDSN(t)})
	if err != nil {
		t.Fatalf("StartPgBouncer: %v", err)
	}
	t.Cleanup(func() {
		if err := bouncer.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	name := databaseOf(t, database)

	connect := func() *pgx.Conn {
		t.Helper()
		conn, err := pgx.Connect(ctx, bouncer.DSN(name)+"&default_query_exec_mode=simple_protocol")
		if err != nil {
			t.Fatalf("connect through pgbouncer: %v", err)
		}
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		return conn
	}
	backend := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) int32 {
		t.Helper()
		var pid int32
		if err := q.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
			t.Fatalf("pg_backend_pid: %v", err)
		}
		return pid
	}

	first, second := connect(), connect()
	firstBackend := backend(first)
	tx, err := second.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // committed below
	if got := backend(tx); got != firstBackend {
		t.Errorf("second client's transaction runs on backend %d, want the idle backend %d the first client used", got, firstBackend)
	}
	if got := backend(first); got == firstBackend {
		t.Errorf("first client still on backend %d while another client's transaction holds it: pooling is per session", got)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	pools, err := bouncer.Show(ctx, "POOLS")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range pools {
		if p["database"] == name {
			found = true
			if p["pool_mode"] != "transaction" {
				t.Errorf("SHOW POOLS pool_mode = %q, want transaction", p["pool_mode"])
			}
		}
	}
	if !found {
		t.Errorf("SHOW POOLS has no pool for %s: %v", name, pools)
	}

	if err := bouncer.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	select {
	case <-bouncer.Exited():
	default:
		t.Fatal("pgbouncer still running after Stop")
	}
	if err := bouncer.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

func TestStartPgBouncerNamesThePackageWhenTheBinaryIsMissing(t *testing.T) {
	_, err := pglocal.StartPgBouncer(context.Background(), pglocal.PgBouncerOptions{
		Upstream: pglocal.DefaultLocalDSN,
		BinPath:  filepath.Join(t.TempDir(), "pgbouncer"),
	})
	if !errors.Is(err, pglocal.ErrNoPgBouncer) {
		t.Fatalf("err = %v, want ErrNoPgBouncer", err)
	}
}

func databaseOf(t *testing.T, dsn string) string {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Database
}
