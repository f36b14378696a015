package conf

import (
	"errors"

	"github.com/jackc/pgx/v5"
)

// Database is the service's PostgreSQL: the pool's DSN, a direct connection for migrations
// (behind a transaction pooler), and how queries are sent (QueryExecMode).
type Database struct {
	DSN          string `json:"dsn"`
	MigrationDSN string `json:"migrationDsn"`
	// MigrateOnStart applies the embedded migrations at start (online: no long lock).
	MigrateOnStart bool `json:"migrateOnStart"`
	LocalDatabase  bool `json:"localDatabase"`
	// MaxConns bounds the connection pool; 0 sizes it by this node's cores (PoolSize).
	MaxConns int32 `json:"maxConns"`
	// MinConns connections are kept open even when idle.
	MinConns      int32  `json:"minConns"`
	QueryExecMode string `json:"queryExecMode"`
	Tx            Tx     `json:"tx"`
}

// Tx is the transaction defaults the writer and the library use.
type Tx struct {
	// Isolation is the transactions' isolation level (read_committed, repeatable_read, serializable).
	Isolation string `json:"isolation"`
	// Timeout bounds one transaction, retries included.
	Timeout Duration `json:"timeout"`
	// LockTimeout bounds a wait for a row lock inside a transaction (SET LOCAL lock_timeout).
	LockTimeout Duration `json:"lockTimeout"`
	// IdleInTransactionTimeout: the server ends a session silent inside a transaction this
	// long, so a frozen owner cannot hold its lease row locked (and block a takeover).
	IdleInTransactionTimeout Duration `json:"idleInTransactionTimeout"`
}

// Bounds of a pool sized by the cores: 4 connections a core, at least 8 (the size measured
// on two cores: the database's cost fell against 32 and no throughput was lost), at most
// 32 (the bound before sizing by the cores).
const (
	poolConnsPerCore = 4
	minAutoPoolConns = 8
	maxAutoPoolConns = 32
)

// PoolSize is the pool's bound on a node with this many cores: MaxConns when set, else 4 a
// core between 8 and 32. Connections beyond what the database's cores can run at once only
// wait for a core there, and each plans the hot statements again (docs/performance.md, the
// pool's size).
func (d Database) PoolSize(cores int) int32 {
	if d.MaxConns > 0 {
		return d.MaxConns
	}
	return int32(min(max(poolConnsPerCore*cores, minAutoPoolConns), maxAutoPoolConns))
}

// ParseQueryExecMode maps database.queryExecMode to pgx. Behind a transaction-mode pooler
// (PgBouncer, Supabase's pooler) prepared statements cannot be relied on: use exec or
// simple_protocol there.
func ParseQueryExecMode(s string) (pgx.QueryExecMode, error) {
	switch s {
	case "", "cache_statement":
		return pgx.QueryExecModeCacheStatement, nil
	case "cache_describe":
		return pgx.QueryExecModeCacheDescribe, nil
	case "describe_exec":
		return pgx.QueryExecModeDescribeExec, nil
	case "exec":
		return pgx.QueryExecModeExec, nil
	case "simple_protocol":
		return pgx.QueryExecModeSimpleProtocol, nil
	default:
		return 0, errors.New("database.queryExecMode: must be cache_statement, cache_describe, describe_exec, exec or simple_protocol")
	}
}

// check: a database to reach, the pool size and the query mode.
func (d Database) check(p *problems) {
	p.require(d.DSN != "" || d.LocalDatabase, "database.dsn", "is empty and database.localDatabase is off: set DATABASE_URL (or database.dsn)")
	p.require(d.MaxConns >= 0, "database.maxConns", "must be 0 (sized by the cores) or positive")
	if _, err := ParseQueryExecMode(d.QueryExecMode); err != nil {
		p.add(err)
	}
}
