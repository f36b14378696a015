package pgtest_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func applyWidgets(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE TABLE widget (id int PRIMARY KEY); INSERT INTO widget VALUES (1)")
	return err
}

func TestDatabasesAreIsolatedAndCarryTheSchema(t *testing.T) {
	ctx := context.Background()
	first := pgtest.NewPool(t, pgtest.NewDatabase(t, pgtest.WithSchema("widgets", applyWidgets)))
	second := pgtest.NewPool(t, pgtest.NewDatabase(t, pgtest.WithSchema("widgets", applyWidgets)))

	if _, err := first.Exec(ctx, "INSERT INTO widget VALUES (2)"); err != nil {
		t.Fatalf("insert into first: %v", err)
	}
	counts := map[string]int{}
	for name, pool := range map[string]interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}{"first": first, "second": second} {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM widget").Scan(&n); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		counts[name] = n
	}
	if counts["first"] != 2 || counts["second"] != 1 {
		t.Fatalf("counts = %v, want first=2 (own insert) and second=1 (template only)", counts)
	}
	var db1, db2 string
	_ = first.QueryRow(ctx, "SELECT current_database()").Scan(&db1)
	_ = second.QueryRow(ctx, "SELECT current_database()").Scan(&db2)
	if db1 == db2 {
		t.Fatalf("both tests got database %s", db1)
	}
}

func TestDatabaseIsDroppedAfterTheTest(t *testing.T) {
	ctx := context.Background()
	var name string
	t.Run("owner", func(t *testing.T) {
		pool := pgtest.NewPool(t, pgtest.NewDatabase(t))
		if err := pool.QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil {
			t.Fatal(err)
		}
	})
	admin, err := pgx.Connect(ctx, pgtest.AdminDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Fatalf("database %s survived its test", name)
	}
}

// With PGTEST_LOCAL_DSN pointing at a closed port (make test-throwaway), the harness must
// have started its own cluster rather than found a server.
func TestThrowawayClusterIsUsedWhenNoServerIsFound(t *testing.T) {
	override := os.Getenv(pgtest.EnvLocalDSN)
	if override == "" || os.Getenv(pgtest.EnvDatabaseURL) != "" {
		t.Skip("runs under `make test-throwaway`, which hides the local server")
	}
	admin := pgtest.AdminDSN(t)
	if admin == override || strings.Contains(admin, ":5432/") {
		t.Fatalf("admin DSN %q is not a throwaway cluster", admin)
	}
}
