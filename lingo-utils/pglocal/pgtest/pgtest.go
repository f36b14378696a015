// Package pgtest gives every integration test in the repository a fresh, isolated database on
// a real PostgreSQL server.
//
// The server is found in this order: TEST_DATABASE_URL (a superuser or CREATEDB role), the
// local server at 127.0.0.1:5432, and finally a throwaway cluster started from the installed
// binaries for the life of the test binary. When none of these works the test fails under
// CI=true and is skipped otherwise, with a message saying how to provide a server.
//
// A package that uses pgtest calls Main from its TestMain so that a throwaway cluster is
// stopped and the per-process template databases are dropped when the tests end.
package pgtest

import (
	"context"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/lingo-utils/pglocal"
)

// EnvDatabaseURL names the variable that points the tests at a server of your choosing.
const EnvDatabaseURL = pglocal.EnvDatabaseURL

// EnvLocalDSN overrides the "usual local server" probed second; pointing it at a closed port
// forces the throwaway cluster, which is how that path is exercised (make test-throwaway).
const EnvLocalDSN = pglocal.EnvLocalDSN

const howToProvide = "no PostgreSQL server for tests: set " + EnvDatabaseURL +
	"=postgres://user@host:port/db (a role that may CREATE DATABASE), start the local server " +
	"(pg_ctlcluster 15 main start), or install the `postgresql` package so a throwaway cluster can be started"

// SchemaFunc applies a schema to the database at dsn.
type SchemaFunc func(ctx context.Context, dsn string) error

// Option configures NewDatabase.
type Option func(*databaseOptions)

type databaseOptions struct {
	schemaKey string
	schema    SchemaFunc
}

// WithSchema clones each new database from a template that has the schema applied once per
// test binary; key identifies the schema (for example the migrations folder).
func WithSchema(key string, apply SchemaFunc) Option {
	return func(o *databaseOptions) {
		o.schemaKey = key
		o.schema = apply
	}
}

// environment is shared by the tests of one binary: there is one server per process, found
// or started on first use. It is the only package-level state, and it exists because
// `go test` gives us no other object that lives as long as the binary.
type environment struct {
	mu        sync.Mutex
	found     bool
	server    *pglocal.Server // nil when none was found
	findErr   error
	templates map[string]string
}

var shared = &environment{templates: map[string]string{}}

// Main runs the package's tests and then releases what the harness started.
func Main(m *testing.M) {
	code := m.Run()
	shared.close()
	os.Exit(code)
}

// AdminDSN returns a superuser DSN on the test server, failing or skipping t when there is none.
func AdminDSN(t testing.TB) string {
	t.Helper()
	server, err := shared.find()
	if err != nil {
		unavailable(t, err)
	}
	return server.AdminDSN
}

// NewDatabase creates a database for this test alone and drops it when the test ends.
// It returns the DSN of the new database.
func NewDatabase(t testing.TB, opts ...Option) string {
	t.Helper()
	var o databaseOptions
	for _, opt := range opts {
		opt(&o)
	}
	admin := AdminDSN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	template := "template0"
	if o.schema != nil {
		tpl, err := shared.template(ctx, o.schemaKey, o.schema)
		if err != nil {
			t.Fatalf("pgtest: build schema template %q: %v", o.schemaKey, err)
		}
		template = tpl
	}
	name := databaseName(t.Name())
	if err := pglocal.CreateDatabase(ctx, admin, name, template); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := pglocal.DropDatabase(ctx, admin, name); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	return pglocal.WithDatabase(admin, name)
}

// NewPool opens a pool on dsn that is closed when the test ends.
func NewPool(t testing.TB, dsn string, configure ...func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("pgtest: parse dsn: %v", err)
	}
	for _, c := range configure {
		c(cfg)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgtest: open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// EnvSkip names the variable that turns a missing database component from a failure into
// a skip (SKIP_DB_TESTS=1); make test then says so in its last line.
const EnvSkip = "SKIP_DB_TESTS"

func unavailable(t testing.TB, err error) {
	t.Helper()
	Unavailable(t, howToProvide, err)
}

// Unavailable ends a test that needs a database component this machine lacks (the server,
// its binaries, PgBouncer): it fails, naming how to provide it, unless SKIP_DB_TESTS=1.
func Unavailable(t testing.TB, howToProvide string, err error) {
	t.Helper()
	if os.Getenv(EnvSkip) == "1" {
		t.Skipf("%s=1: %s (%v)", EnvSkip, howToProvide, err)
	}
	t.Fatalf("%s (%v); set %s=1 to skip the database tests instead", howToProvide, err, EnvSkip)
}

// find locates the server on first use (pglocal.FindServer) and remembers the answer,
// failure included, for every later test of the binary.
func (e *environment) find() (*pglocal.Server, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.found {
		e.found = true
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		e.server, e.findErr = pglocal.FindServer(ctx)
	}
	return e.server, e.findErr
}

func (e *environment) template(ctx context.Context, key string, apply SchemaFunc) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if name, ok := e.templates[key]; ok {
		return name, nil
	}
	admin := e.server.AdminDSN
	name := databaseName("tpl_" + key)
	if err := pglocal.CreateDatabase(ctx, admin, name, "template0"); err != nil {
		return "", err
	}
	if err := apply(ctx, pglocal.WithDatabase(admin, name)); err != nil {
		_ = pglocal.DropDatabase(ctx, admin, name)
		return "", err
	}
	e.templates[key] = name
	return name, nil
}

func (e *environment) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.server == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for key, name := range e.templates {
		_ = pglocal.DropDatabase(ctx, e.server.AdminDSN, name)
		delete(e.templates, key)
	}
	_ = e.server.Close()
	e.server = nil
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9_]+`)

// databaseName keeps a readable hint of the test plus a random suffix, since several test
// binaries share one server at the same time.
func databaseName(hint string) string {
	hint = unsafeChars.ReplaceAllString(strings.ToLower(hint), "_")
	if len(hint) > 40 {
		hint = hint[:40]
	}
	return pglocal.UniqueDatabaseName("pgtest_" + strings.Trim(hint, "_"))
}
