package pglocal

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"

	"github.com/jackc/pgx/v5"
)

// EnvDatabaseURL names the variable that points tests and local runs at a server of your
// choosing (a superuser or CREATEDB role).
const EnvDatabaseURL = "TEST_DATABASE_URL"

// EnvLocalDSN overrides DefaultLocalDSN, the "usual local server" probed second; pointing it
// at a closed port forces the throwaway cluster, which is how that path is exercised (make
// test-throwaway).
const EnvLocalDSN = "PGTEST_LOCAL_DSN"

// Server is a PostgreSQL server to create databases on, found by FindServer.
type Server struct {
	// AdminDSN connects as a role that may create and drop databases.
	AdminDSN string
	// Source says where the server came from, for messages: EnvDatabaseURL, the local
	// server, or a throwaway cluster.
	Source string
	// cluster is the throwaway cluster this process started, if it did.
	cluster *Cluster
}

// FindServer locates a server in this order: EnvDatabaseURL, the local server at
// DefaultLocalDSN (or EnvLocalDSN), and finally a throwaway cluster started from the
// installed binaries, which the caller owns and stops with Close.
func FindServer(ctx context.Context) (*Server, error) {
	if dsn := os.Getenv(EnvDatabaseURL); dsn != "" {
		if err := Probe(ctx, dsn); err != nil {
			return nil, fmt.Errorf("%s is set but unreachable: %w", EnvDatabaseURL, err)
		}
		return &Server{AdminDSN: dsn, Source: EnvDatabaseURL}, nil
	}
	local := DefaultLocalDSN
	if override := os.Getenv(EnvLocalDSN); override != "" {
		local = override
	}
	if err := Probe(ctx, local); err == nil {
		return &Server{AdminDSN: local, Source: "local server " + hostOf(local)}, nil
	}
	cluster, err := StartCluster(ctx, ClusterOptions{})
	if err != nil {
		return nil, fmt.Errorf("no %s, no server at 127.0.0.1:5432, and no throwaway cluster: %w", EnvDatabaseURL, err)
	}
	return &Server{AdminDSN: cluster.DSN, Source: "throwaway cluster", cluster: cluster}, nil
}

// StartServer starts a throwaway cluster with opts and returns it as a Server the caller
// owns and stops with Close: for a run that needs settings the shared server lacks (a
// benchmark that loads pg_stat_statements).
func StartServer(ctx context.Context, opts ClusterOptions) (*Server, error) {
	cluster, err := StartCluster(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &Server{AdminDSN: cluster.DSN, Source: "throwaway cluster", cluster: cluster}, nil
}

// Close stops the throwaway cluster, if FindServer started one.
func (s *Server) Close() error {
	if s.cluster == nil {
		return nil
	}
	return s.cluster.Stop()
}

// UniqueDatabaseName is prefix plus a random suffix: several runs and test binaries share
// one server at the same time.
func UniqueDatabaseName(prefix string) string {
	var suffix [6]byte
	_, _ = rand.Read(suffix[:]) // crypto/rand.Read never fails; it crashes the program instead
	return prefix + "_" + hex.EncodeToString(suffix[:])
}

// CreateDatabase creates database name on the server at adminDSN as a copy of template.
// Its errors are the server's, for the caller to put in context.
func CreateDatabase(ctx context.Context, adminDSN, name, template string) error {
	return execAdmin(ctx, adminDSN, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE "+pgx.Identifier{template}.Sanitize())
}

// DropDatabase drops database name if it exists. FORCE ends the sessions still attached
// (a failed test's, a killed process's), so the drop never waits on them.
func DropDatabase(ctx context.Context, adminDSN, name string) error {
	return execAdmin(ctx, adminDSN, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
}

// WithDatabase points dsn, a URL or a keyword/value string, at database.
func WithDatabase(dsn, database string) string {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		// Keyword/value DSN: a later dbname wins.
		return dsn + " dbname=" + database
	}
	u.Path = "/" + database
	return u.String()
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

// hostOf is the host:port of a URL DSN, for messages; other DSNs are named as such.
func hostOf(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && u.Host != "" {
		return u.Host
	}
	return "(keyword/value DSN)"
}
