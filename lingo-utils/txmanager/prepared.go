package txmanager

import (
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// preparedStatements tells whether a pipeline's statements would reach the server's parser
// before the pipeline's BEGIN. pgx prepares a statement it has not cached on the connection
// (and, in describe-exec mode, describes every statement) in a round trip of its own ahead
// of the batch. That parse takes the statement's table locks outside the transaction, where
// SET LOCAL lock_timeout does not reach: behind a migration's lock it waited for the
// attempt's whole deadline and failed as a begin timeout, where the lock timeout gives a
// retryable lock_not_available. Such a transaction begins alone on the connection, and its
// first statement is parsed inside it; from then on the connection has it cached and
// BEGIN goes with it again.
//
// pgx does not show its statement cache, so this keeps its own record of the first
// statements each connection has run. The record can be wrong only where pgx dropped a
// statement it still lists: more distinct statements on the connection than pgx's cache
// holds, counting those run outside this library, or a statement pgx invalidated after a
// schema change. That statement is parsed before BEGIN once more, bounded by the attempt's
// deadline as every statement was before.
type preparedStatements struct {
	mode pgx.QueryExecMode
	// capacity is how many statements pgx caches a connection; the record of a connection
	// that reaches it starts again.
	capacity int
	// pruneAbove is how many connections are recorded before those the pool closed are
	// dropped from the record.
	pruneAbove int64
	conns      sync.Map // *pgx.Conn → *connStatements
	count      atomic.Int64
}

type connStatements struct {
	mu  sync.Mutex
	sql map[string]struct{}
}

func newPreparedStatements(pool *pgxpool.Pool) *preparedStatements {
	cfg := pool.Config()
	p := &preparedStatements{mode: cfg.ConnConfig.DefaultQueryExecMode, pruneAbove: 2*int64(cfg.MaxConns) + 16}
	switch p.mode {
	case pgx.QueryExecModeCacheStatement:
		p.capacity = cfg.ConnConfig.StatementCacheCapacity
	case pgx.QueryExecModeCacheDescribe:
		p.capacity = cfg.ConnConfig.DescriptionCacheCapacity
	}
	return p
}

// parsedFirst reports whether pgx would parse any of queries on conn before the batch runs.
func (p *preparedStatements) parsedFirst(conn *pgx.Conn, queries []*pgx.QueuedQuery) bool {
	if p == nil {
		return true
	}
	switch p.mode {
	case pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol:
		return false // parsed in the pipeline's order, after BEGIN
	case pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe:
	default: // describe-exec describes every statement ahead of the batch
		return true
	}
	entry, ok := p.conns.Load(conn)
	if !ok {
		return true
	}
	statements := entry.(*connStatements)
	statements.mu.Lock()
	defer statements.mu.Unlock()
	for _, q := range queries {
		if _, cached := statements.sql[q.SQL]; !cached {
			return true
		}
	}
	return false
}

// record notes that queries ran without error on conn in a transaction begun alone: pgx
// has them cached there now.
func (p *preparedStatements) record(conn *pgx.Conn, queries []*pgx.QueuedQuery) {
	if p == nil || p.capacity <= 0 {
		return
	}
	entry, loaded := p.conns.LoadOrStore(conn, &connStatements{sql: map[string]struct{}{}})
	if !loaded && p.count.Add(1) > p.pruneAbove {
		p.pruneClosed()
	}
	statements := entry.(*connStatements)
	statements.mu.Lock()
	defer statements.mu.Unlock()
	added := 0
	for _, q := range queries {
		if _, known := statements.sql[q.SQL]; !known {
			added++
		}
	}
	if len(statements.sql)+added > p.capacity {
		clear(statements.sql)
	}
	if len(queries) > p.capacity {
		return // more than pgx keeps: some are dropped already
	}
	for _, q := range queries {
		statements.sql[q.SQL] = struct{}{}
	}
}

// forget drops sqls from conn's record: pgx dropped them from its cache when they failed.
func (p *preparedStatements) forget(conn *pgx.Conn, sqls []string) {
	if p == nil {
		return
	}
	entry, ok := p.conns.Load(conn)
	if !ok {
		return
	}
	statements := entry.(*connStatements)
	statements.mu.Lock()
	defer statements.mu.Unlock()
	for _, sql := range sqls {
		delete(statements.sql, sql)
	}
}

// forgetConn drops conn's whole record.
func (p *preparedStatements) forgetConn(conn *pgx.Conn) {
	if p == nil {
		return
	}
	if _, deleted := p.conns.LoadAndDelete(conn); deleted {
		p.count.Add(-1)
	}
}

// pruneClosed drops the connections the pool has closed.
func (p *preparedStatements) pruneClosed() {
	p.conns.Range(func(key, _ any) bool {
		if conn := key.(*pgx.Conn); conn.IsClosed() {
			p.forgetConn(conn)
		}
		return true
	})
}
