// Package testsupport gives the service's tests a migrated database on a real PostgreSQL.
package testsupport

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"
	migrations "github.com/bionicotaku/txmanager-migrations"

	"github.com/bionicotaku/txmanager-service/internal/repositories"
)

// Migrate applies the schema to the database at dsn with the service's own migrator, so
// tests exercise it too. MigratedDSN uses it; a test that made its database on a server of
// its own calls it directly.
func Migrate(ctx context.Context, dsn string) error {
	_, err := repositories.Migrate(ctx, dsn, migrations.FS)
	return err
}

// MigratedDSN returns the DSN of a fresh database with the schema applied.
func MigratedDSN(t testing.TB) string {
	t.Helper()
	return pgtest.NewDatabase(t, pgtest.WithSchema("txmanager-migrations", Migrate))
}

// MigratedPool returns a pool on a fresh migrated database.
func MigratedPool(t testing.TB, configure ...func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	return pgtest.NewPool(t, MigratedDSN(t), configure...)
}
