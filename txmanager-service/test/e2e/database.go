package e2e

import (
	"context"
	"fmt"

	"github.com/bionicotaku/lingo-utils/pglocal"
)

// Postgres is the server a run creates its databases on, found as the repository's tests
// find theirs (pglocal.FindServer): TEST_DATABASE_URL, else the local server, else a
// throwaway cluster this process starts and owns. Close stops that cluster.
type Postgres struct {
	*pglocal.Server
}

// FindPostgres locates (or starts) the server.
func FindPostgres(ctx context.Context) (*Postgres, error) {
	server, err := pglocal.FindServer(ctx)
	if err != nil {
		return nil, err
	}
	return &Postgres{server}, nil
}

// StartPostgres starts a throwaway cluster of this process's own with settings (name=value)
// on top of a durable server's defaults, as the shared server is configured: for a run that
// needs what only a start can set (shared_preload_libraries=pg_stat_statements).
func StartPostgres(ctx context.Context, settings ...string) (*Postgres, error) {
	server, err := pglocal.StartServer(ctx, pglocal.ClusterOptions{Durable: true, Settings: settings})
	if err != nil {
		return nil, err
	}
	return &Postgres{server}, nil
}

// Database is one database created for a run; several service instances may share it.
type Database struct {
	Name string
	// DSN connects to this database with the server's admin credentials.
	DSN      string
	adminDSN string
}

// CreateDatabase creates an empty database named after prefix plus a random suffix, since
// runs and test binaries share one server. The service migrates it itself on start.
func (p *Postgres) CreateDatabase(ctx context.Context, prefix string) (*Database, error) {
	name := pglocal.UniqueDatabaseName(prefix)
	if err := pglocal.CreateDatabase(ctx, p.AdminDSN, name, "template0"); err != nil {
		return nil, fmt.Errorf("create database %s: %w", name, err)
	}
	return &Database{Name: name, DSN: pglocal.WithDatabase(p.AdminDSN, name), adminDSN: p.AdminDSN}, nil
}

// Drop removes the database, disconnecting anything still attached.
func (d *Database) Drop(ctx context.Context) error {
	if err := pglocal.DropDatabase(ctx, d.adminDSN, d.Name); err != nil {
		return fmt.Errorf("drop database %s: %w", d.Name, err)
	}
	return nil
}
