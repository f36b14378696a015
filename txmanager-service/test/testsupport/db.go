// Package testsupport gives the service's tests a migrated database on a real PostgreSQL.
package testsupport

import (
	"context"
	"testing"

	"github.com/go-kratos/kratos/v2/log"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"
	"github.com/bionicotaku/lingo-utils/txmanager"
	migrations "github.com/bionicotaku/txmanager-migrations"

	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
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

// TxManager is the library's transaction manager on pool, logging errors only.
func TxManager(t testing.TB, pool *pgxpool.Pool) txmanager.Manager {
	t.Helper()
	component, err := txmanager.NewComponentWithDependencies(txmanager.Config{}, pool,
		txmanager.Dependencies{Logger: log.NewFilter(log.DefaultLogger, log.FilterLevel(log.LevelError))})
	if err != nil {
		t.Fatal(err)
	}
	return component.Manager
}

// AuditTrail is an audit trail on pool, its records naming node.
func AuditTrail(t testing.TB, pool *pgxpool.Pool, node string) *services.AuditTrail {
	t.Helper()
	return services.NewAuditTrail(TxManager(t, pool), repositories.NewAuditRepository(pool), services.NodeName(node), services.SystemClock{},
		log.NewFilter(log.DefaultLogger, log.FilterLevel(log.LevelError)))
}

// PolicyBook is the spending policies' admin service on pool, auditing to trail.
func PolicyBook(t testing.TB, pool *pgxpool.Pool, trail *services.AuditTrail) *services.PolicyBook {
	t.Helper()
	book, err := services.NewPolicyBook(TxManager(t, pool), repositories.NewPolicyRepository(pool), trail, services.KnownRoles{"approver", "treasury"}, nil,
		log.NewFilter(log.DefaultLogger, log.FilterLevel(log.LevelError)))
	if err != nil {
		t.Fatal(err)
	}
	return book
}

// ApprovalDesk is where intents sent for approval wait, on pool, auditing to trail.
func ApprovalDesk(t testing.TB, pool *pgxpool.Pool, trail *services.AuditTrail, node string) *services.ApprovalDesk {
	t.Helper()
	desk, err := services.NewApprovalDesk(TxManager(t, pool), repositories.NewApprovalRepository(pool), trail, services.NodeName(node), nil,
		log.NewFilter(log.DefaultLogger, log.FilterLevel(log.LevelError)))
	if err != nil {
		t.Fatal(err)
	}
	return desk
}
