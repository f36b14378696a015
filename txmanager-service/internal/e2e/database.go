package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/bionicotaku/lingo-utils/pglocal"
)

// Postgres is the server a run creates its databases on: TEST_DATABASE_URL, else the local
// server at pglocal.DefaultLocalDSN, else a throwaway cluster this process starts and owns.
// The same order, and the same variables, as the repository's tests (pglocal/pgtest).
type Postgres struct {
	// AdminDSN connects as a role that may create and drop databases.
	AdminDSN string
	// Source says which of the three it is, for the run's summary.
	Source  string
	cluster *pglocal.Cluster
}

// FindPostgres locates (or starts) the server.
func FindPostgres(ctx context.Context) (*Postgres, error) {
	if dsn := os.Getenv("TEST_DATABASE_URL"); dsn != "" {
		if err := pglocal.Probe(ctx, dsn); err != nil {
			return nil, fmt.Errorf("TEST_DATABASE_URL is set but unreachable: %w", err)
		}
		return &Postgres{AdminDSN: dsn, Source: "TEST_DATABASE_URL"}, nil
	}
	local := pglocal.DefaultLocalDSN
	// PGTEST_LOCAL_DSN moves (or, pointed at a closed port, skips) the local server, as
	// for the tests; `make test-throwaway` uses it to force a throwaway cluster.
	if override := os.Getenv("PGTEST_LOCAL_DSN"); override != "" {
		local = override
	}
	if err := pglocal.Probe(ctx, local); err == nil {
		return &Postgres{AdminDSN: local, Source: "local server " + hostOf(local)}, nil
	}
	cluster, err := pglocal.StartCluster(ctx, pglocal.ClusterOptions{})
	if err != nil {
		return nil, fmt.Errorf("no TEST_DATABASE_URL, no server at 127.0.0.1:5432, and no throwaway cluster: %w", err)
	}
	return &Postgres{AdminDSN: cluster.DSN, Source: "throwaway cluster", cluster: cluster}, nil
}

// Close stops the throwaway cluster, if this process started one.
func (p *Postgres) Close() error {
	if p.cluster == nil {
		return nil
	}
	return p.cluster.Stop()
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
	var suffix [6]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return nil, fmt.Errorf("database name: %w", err)
	}
	name := prefix + "_" + hex.EncodeToString(suffix[:])
	if err := execAdmin(ctx, p.AdminDSN, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE template0"); err != nil {
		return nil, fmt.Errorf("create database %s: %w", name, err)
	}
	return &Database{Name: name, DSN: withDatabase(p.AdminDSN, name), adminDSN: p.AdminDSN}, nil
}

// Drop removes the database, disconnecting anything still attached.
func (d *Database) Drop(ctx context.Context) error {
	if err := execAdmin(ctx, d.adminDSN, "DROP DATABASE IF EXISTS "+pgx.Identifier{d.Name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", d.Name, err)
	}
	return nil
}

// hostOf is the host:port of a URL DSN, for messages; other DSNs are named as such.
func hostOf(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Host != "" {
		return u.Host
	}
	return "(keyword/value DSN)"
}

func execAdmin(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// withDatabase points dsn, a URL or a keyword/value string, at database.
func withDatabase(dsn, database string) string {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		// Keyword/value DSN: a later dbname wins.
		return dsn + " dbname=" + database
	}
	u.Path = "/" + database
	return u.String()
}
