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

// applyMigrations runs the service's own migrator, so tests exercise it too.
func applyMigrations(ctx context.Context, dsn string) error {
	_, err := repositories.Migrate(ctx, dsn, migrations.FS)
	return err
}

// Migrate applies the schema to the database at dsn: for a database the test made on a
// server of its own.
func Migrate(ctx context.Context, dsn string) error { return applyMigrations(ctx, dsn) }

// MigratedDSN returns the DSN of a fresh database with the schema applied.
func MigratedDSN(t testing.TB) string {
	t.Helper()
	return pgtest.NewDatabase(t, pgtest.WithSchema("txmanager-migrations", applyMigrations))
}

// MigratedPool returns a pool on a fresh migrated database.
func MigratedPool(t testing.TB, configure ...func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	return pgtest.NewPool(t, MigratedDSN(t), configure...)
}
