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
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/lingo-utils/pglocal"
)

// EnvDatabaseURL names the variable that points the tests at a server of your choosing.
const EnvDatabaseURL = "TEST_DATABASE_URL"

// EnvLocalDSN overrides the "usual local server" probed second; pointing it at a closed port
// forces the throwaway cluster, which is how that path is exercised (make test-throwaway).
const EnvLocalDSN = "PGTEST_LOCAL_DSN"

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
	adminDSN  string
	findErr   error
	cluster   *pglocal.Cluster
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
	dsn, err := shared.server()
	if err != nil {
		unavailable(t, err)
	}
	return dsn
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
	if err := execAdmin(ctx, admin, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", pgx.Identifier{name}.Sanitize(), pgx.Identifier{template}.Sanitize())); err != nil {
		t.Fatalf("pgtest: create database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// FORCE ends sessions a failed test left behind, so the drop never waits on them.
		if err := execAdmin(ctx, admin, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	return withDatabase(admin, name)
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

func unavailable(t testing.TB, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s (%v)", howToProvide, err)
	}
	t.Skipf("%s (%v)", howToProvide, err)
}

func (e *environment) server() (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.found {
		return e.adminDSN, e.findErr
	}
	e.found = true
	e.adminDSN, e.findErr = e.locate()
	return e.adminDSN, e.findErr
}

func (e *environment) locate() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if dsn := os.Getenv(EnvDatabaseURL); dsn != "" {
		if err := pglocal.Probe(ctx, dsn); err != nil {
			return "", fmt.Errorf("%s is set but unreachable: %w", EnvDatabaseURL, err)
		}
		return dsn, nil
	}
	local := pglocal.DefaultLocalDSN
	if override := os.Getenv(EnvLocalDSN); override != "" {
		local = override
	}
	if err := pglocal.Probe(ctx, local); err == nil {
		return local, nil
	}
	cluster, err := pglocal.StartCluster(ctx, pglocal.ClusterOptions{})
	if err != nil {
		return "", fmt.Errorf("no server at 127.0.0.1:5432 and no throwaway cluster: %w", err)
	}
	e.cluster = cluster
	return cluster.DSN, nil
}

func (e *environment) template(ctx context.Context, key string, apply SchemaFunc) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if name, ok := e.templates[key]; ok {
		return name, nil
	}
	name := databaseName("tpl_" + key)
	if err := execAdmin(ctx, e.adminDSN, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE template0"); err != nil {
		return "", err
	}
	if err := apply(ctx, withDatabase(e.adminDSN, name)); err != nil {
		_ = execAdmin(ctx, e.adminDSN, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		return "", err
	}
	e.templates[key] = name
	return name, nil
}

func (e *environment) close() {
	e.mu.Lock()
	defer e.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for key, name := range e.templates {
		_ = execAdmin(ctx, e.adminDSN, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
		delete(e.templates, key)
	}
	if e.cluster != nil {
		_ = e.cluster.Stop()
		e.cluster = nil
	}
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

var unsafeChars = regexp.MustCompile(`[^a-z0-9_]+`)

// databaseName keeps a readable hint of the test plus a random suffix, since several test
// binaries share one server at the same time.
func databaseName(hint string) string {
	hint = unsafeChars.ReplaceAllString(strings.ToLower(hint), "_")
	if len(hint) > 40 {
		hint = hint[:40]
	}
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	return "pgtest_" + strings.Trim(hint, "_") + "_" + hex.EncodeToString(suffix[:])
}

func withDatabase(dsn, database string) string {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		// Keyword/value DSN: a later dbname wins.
		return dsn + " dbname=" + database
	}
	u.Path = "/" + database
	return u.String()
}
