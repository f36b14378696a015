package txmanager

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// deferredSession opens its transaction with its first statement instead of a round trip of
// its own: BEGIN and the SET LOCAL settings are queued in one pipeline with that statement
// (pgx's Batch.BeginTx), so a transaction of one statement costs two round trips (the
// statement, COMMIT) instead of three. A transaction that runs no statement costs none.
//
// Where a statement cannot share the pipeline, the transaction begins on its own first, as
// pgx.BeginTx does: an Exec without arguments (pgx sends it over the simple protocol, which
// accepts several statements in one string, and the extended protocol of a pipeline does
// not), CopyFrom, a caller asking for the pgx.Tx itself, and a statement whose first
// argument is one of pgx's per-query options (a pipeline would send it as a parameter).
//
// Its first statement decides whether a transaction exists, so that decision is locked: two
// goroutines racing to run it must not open two transactions, one of which nobody would ever
// end; and Exec holds the lock throughout, so concurrent Execs take turns. Queries are as on
// a pgx.Tx: their rows are closed before the next statement. A session used after its
// attempt ended answers pgx.ErrTxClosed, as a pgx.Tx does, even when it never began one.
type deferredSession struct {
	pool *pgxpool.Pool
	// prepared tells a first statement pgx would parse before the pipeline's BEGIN, which
	// then begins alone (preparedStatements).
	prepared *preparedStatements
	// ctx is the attempt's context, for a begin that Tx() makes (it takes none).
	ctx      context.Context
	options  pgx.TxOptions // isolation and access mode, for the pipeline's BEGIN
	settings []string      // the SET LOCAL statements queued after it
	// beginQuery is BEGIN and the settings in one string, for a begin of its own.
	beginQuery string
	readOnly   bool

	// conn is the connection the transaction runs on, once it has begun: a statement that
	// fails there is dropped from pgx's cache, and from prepared's record with it.
	conn atomic.Pointer[pgx.Conn]
	// handedOut: Tx() gave pgx's transaction to the caller, whose statements on it the
	// session does not see; the transaction's end forgets the connection's record.
	handedOut bool

	// mu guards tx, beginErr, ended and handedOut: whether the transaction has begun, and
	// whether the attempt ended it.
	mu sync.Mutex
	tx pgx.Tx // nil until the transaction has begun
	// beginErr is why the transaction could not begin: nothing ran, and the attempt fails
	// in the begin phase whatever the callback made of the error.
	beginErr error
	ended    bool
}

func (s *deferredSession) DB() DBTX       { return s }
func (s *deferredSession) ReadOnly() bool { return s.readOnly }

// Tx begins the transaction if no statement has yet, and returns pgx's own transaction. If
// it cannot begin, or the attempt has ended, the transaction returned answers every call
// with an error (the attempt fails with the reason it could not begin).
func (s *deferredSession) Tx() pgx.Tx {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tx == nil && s.ended {
		return closedTx(pgx.ErrTxClosed)
	}
	s.beginAlone(s.ctx)
	s.handedOut = true
	return s.tx
}

// closedTx is a transaction that answers every call with err.
func closedTx(err error) pgx.Tx {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	return pgx.FailedBatchResults(b, err).Tx()
}

// errRows are rows that answer err, for a query that never ran: pgx's own Query returns
// such rows rather than nil, and callers pass them on unchecked (pgx.CollectRows).
func errRows(err error) pgx.Rows {
	rows, _ := pgx.FailedBatchResults(&pgx.Batch{}, err).Query()
	return rows
}

// withQueryOptions reports a statement whose first argument is one of pgx's per-query
// options, which a pipeline does not take (it would send them as parameters).
func withQueryOptions(args []any) bool {
	if len(args) == 0 {
		return false
	}
	switch args[0].(type) {
	case pgx.QueryExecMode, pgx.QueryResultFormats, pgx.QueryResultFormatsByOID:
		return true
	}
	return false
}

// beginAlone begins the transaction in a round trip of its own, unless it has begun. The
// caller holds the lock.
func (s *deferredSession) beginAlone(ctx context.Context) {
	if s.tx != nil {
		return
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		s.beginErr, s.tx = err, closedTx(err)
		return
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: s.options.IsoLevel, AccessMode: s.options.AccessMode, BeginQuery: s.beginQuery})
	if err != nil {
		conn.Release()
		s.beginErr, s.tx = err, closedTx(err)
		return
	}
	s.conn.Store(conn.Conn())
	s.tx = &releasingTx{Tx: tx, conn: conn}
}

// failed drops sqls from the record of statements cached on the transaction's connection:
// pgx drops a statement from its cache when it fails (and every statement of a batch that
// fails), so a record that kept it would send it to be parsed ahead of a later pipeline.
func (s *deferredSession) failed(sqls ...string) {
	if conn := s.conn.Load(); conn != nil {
		s.prepared.forget(conn, sqls)
	}
}

// pipeline sends BEGIN, the settings and the caller's queries in one batch and reads the
// results of BEGIN and the settings; the caller's results follow in the returned batch.
// Where pgx would parse a query before the batch, it begins the transaction alone on the
// connection instead and returns no batch: the caller runs its queries on s.tx, and once
// they have run without error calls cached, which records them as cached on the
// connection (a prepare that failed, behind a lock say, left nothing cached, and the next
// transaction must begin alone again). The caller holds the lock.
func (s *deferredSession) pipeline(ctx context.Context, queries []*pgx.QueuedQuery) (pgx.BatchResults, func(), error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		s.beginErr, s.tx = err, closedTx(err)
		return nil, nil, err
	}
	if s.prepared.parsedFirst(conn.Conn(), queries) {
		tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: s.options.IsoLevel, AccessMode: s.options.AccessMode, BeginQuery: s.beginQuery})
		if err != nil {
			conn.Release()
			s.beginErr, s.tx = err, closedTx(err)
			return nil, nil, err
		}
		pgxConn := conn.Conn()
		s.conn.Store(pgxConn)
		s.tx = &releasingTx{Tx: tx, conn: conn}
		return nil, func() { s.prepared.record(pgxConn, queries) }, nil
	}
	b := &pgx.Batch{}
	b.BeginTx(s.options)
	for _, q := range s.settings {
		b.Queue(q)
	}
	b.QueuedQueries = append(b.QueuedQueries, queries...)
	br := sendOn(ctx, conn, b)
	s.conn.Store(conn.Conn())
	s.tx = &releasingTx{Tx: br.Tx(), conn: conn}
	for range 1 + len(s.settings) {
		if _, err := br.Exec(); err != nil {
			s.beginErr = err
			_ = br.Close()
			return nil, nil, err
		}
	}
	return br, nil, nil
}

// sendOn sends the batch on the connection. The pool's own SendBatch acquires the connection
// and does the same, but a panic while it encodes an argument (a driver.Valuer with a bug)
// would leave that connection acquired for ever: here it goes back to the pool (closed, as
// its state is unknown) before the panic goes on.
func sendOn(ctx context.Context, conn *pgxpool.Conn, b *pgx.Batch) pgx.BatchResults {
	defer func() {
		if panicValue := recover(); panicValue != nil {
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
			conn.Release()
			panic(panicValue)
		}
	}()
	return conn.SendBatch(ctx, b)
}

// releasingTx is the transaction a pipeline began on a connection of its own acquiring: its
// end gives the connection back to the pool, as the pool's transactions do.
type releasingTx struct {
	pgx.Tx
	conn *pgxpool.Conn
	once sync.Once
}

func (t *releasingTx) Commit(ctx context.Context) error {
	defer t.release()
	return t.Tx.Commit(ctx)
}

func (t *releasingTx) Rollback(ctx context.Context) error {
	defer t.release()
	return t.Tx.Rollback(ctx)
}

func (t *releasingTx) release() { t.once.Do(t.conn.Release) }

// Exec runs under the session's lock from start to end, so statements of goroutines sharing
// the session go one after another on its connection. A query's rows are the caller's to
// close before the next statement, as on a pgx.Tx.
func (s *deferredSession) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.tx != nil:
	case s.ended:
		return pgconn.CommandTag{}, pgx.ErrTxClosed
	case len(args) == 0 || withQueryOptions(args):
		s.beginAlone(ctx)
	default:
		br, cached, err := s.pipeline(ctx, []*pgx.QueuedQuery{{SQL: sql, Arguments: args}})
		if err != nil {
			s.failed(sql)
			return pgconn.CommandTag{}, err
		}
		if br != nil {
			tag, err := br.Exec()
			if closeErr := br.Close(); err == nil {
				err = closeErr
			}
			if err != nil {
				s.failed(sql)
			}
			return tag, err
		}
		tag, err := s.tx.Exec(ctx, sql, args...)
		if err != nil {
			s.failed(sql)
		} else {
			cached()
		}
		return tag, err
	}
	tag, err := s.tx.Exec(ctx, sql, args...)
	if err != nil {
		s.failed(sql)
	}
	return tag, err
}

func (s *deferredSession) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	tx, br, cached, err := s.beginForQuery(ctx, []*pgx.QueuedQuery{{SQL: sql, Arguments: args}}, withQueryOptions(args))
	switch {
	case err != nil:
		s.failed(sql)
		return errRows(err), err
	case br != nil:
		rows, err := br.Query()
		if err != nil {
			_ = br.Close()
			s.failed(sql)
			return rows, err
		}
		return &watchedRows{Rows: rows, batch: br, failed: func() { s.failed(sql) }}, nil
	}
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		s.failed(sql)
		return rows, err
	}
	if cached != nil {
		cached() // pgx prepares before it answers: the statement is on the connection now
	}
	return &watchedRows{Rows: rows, failed: func() { s.failed(sql) }}, nil
}

// beginForQuery is the locked part of a Query or a SendBatch: the transaction it runs on, or
// the pipeline that began it with the queries (their results to be read), or why neither.
// cached, when not nil, is the pipeline's record of the queries for a transaction it began
// alone, to call once they ran. The lock is released by defer: a panic while the first
// statement's arguments are encoded must leave it free, or the attempt's rollback would
// wait on it for ever.
func (s *deferredSession) beginForQuery(ctx context.Context, queries []*pgx.QueuedQuery, alone bool) (tx pgx.Tx, br pgx.BatchResults, cached func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.tx != nil:
	case s.ended:
		return nil, nil, nil, pgx.ErrTxClosed
	case alone:
		s.beginAlone(ctx)
	default:
		if br, cached, err = s.pipeline(ctx, queries); br != nil || err != nil {
			return nil, br, nil, err
		}
	}
	return s.tx, nil, cached, nil
}

func (s *deferredSession) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := s.Query(ctx, sql, args...)
	return pipelinedRow{rows: rows, err: err}
}

func (s *deferredSession) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.tx == nil && s.ended {
		return 0, pgx.ErrTxClosed
	}
	s.beginAlone(ctx)
	return s.tx.CopyFrom(ctx, table, columns, src)
}

func (s *deferredSession) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	tx, br, cached, err := s.beginForQuery(ctx, b.QueuedQueries, false)
	failed := func() {
		sqls := make([]string, len(b.QueuedQueries))
		for i, q := range b.QueuedQueries {
			sqls[i] = q.SQL
		}
		s.failed(sqls...)
	}
	switch {
	case err != nil:
		failed()
		return pgx.FailedBatchResults(b, err)
	case br != nil:
		return &watchedBatchResults{BatchResults: br, failed: failed}
	}
	return &watchedBatchResults{BatchResults: tx.SendBatch(ctx, b), cached: cached, failed: failed}
}

// watchedBatchResults are a batch's results as the record of cached statements needs them:
// a failure anywhere in the batch made pgx drop all its statements (failed); a batch that
// closes without one, run first in a transaction begun alone, has them all prepared on the
// connection (cached, when not nil).
type watchedBatchResults struct {
	pgx.BatchResults
	cached, failed func()
	sawError       bool
}

func (r *watchedBatchResults) note(err error) {
	if err != nil && !r.sawError {
		r.sawError = true
		r.failed()
	}
}

func (r *watchedBatchResults) Exec() (pgconn.CommandTag, error) {
	tag, err := r.BatchResults.Exec()
	r.note(err)
	return tag, err
}

func (r *watchedBatchResults) Query() (pgx.Rows, error) {
	rows, err := r.BatchResults.Query()
	r.note(err)
	return rows, err
}

func (r *watchedBatchResults) QueryRow() pgx.Row {
	return watchedRow{Row: r.BatchResults.QueryRow(), note: r.note}
}

func (r *watchedBatchResults) Close() error {
	err := r.BatchResults.Close()
	r.note(err)
	if err == nil && !r.sawError && r.cached != nil {
		r.cached()
	}
	r.cached = nil
	return err
}

// watchedRow passes a row's failure to note; no row at all is no failure of the statement.
type watchedRow struct {
	pgx.Row
	note func(error)
}

func (r watchedRow) Scan(dest ...any) error {
	err := r.Row.Scan(dest...)
	if !errors.Is(err, pgx.ErrNoRows) {
		r.note(err)
	}
	return err
}

func (s *deferredSession) txHandedOut() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.handedOut
}

func (s *deferredSession) begun() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tx != nil
}

func (s *deferredSession) connClosed() bool {
	conn := s.conn.Load()
	return conn != nil && conn.IsClosed()
}

func (s *deferredSession) beginError() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.beginErr
}

// commit and rollback end what began: a transaction that never began has nothing to end.
// Either way the session is done: a statement after it is refused, not a new transaction.
func (s *deferredSession) commit(ctx context.Context) error {
	if tx := s.end(); tx != nil {
		return tx.Commit(ctx)
	}
	return nil
}

func (s *deferredSession) rollback(ctx context.Context) error {
	if tx := s.end(); tx != nil {
		return tx.Rollback(ctx)
	}
	return nil
}

// end marks the session ended and returns its transaction (nil when none began). The
// connection goes back to the pool with the transaction's end, so the session lets go of it
// here: a statement refused afterwards must not touch the record of a connection another
// session may hold by then. Where the caller had pgx's own transaction, whose failures the
// session does not see, the connection's record is dropped.
func (s *deferredSession) end() pgx.Tx {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	if conn := s.conn.Swap(nil); conn != nil && s.handedOut {
		s.prepared.forgetConn(conn)
	}
	return s.tx
}

// watchedRows are a query's rows in the transaction. Those of a pipeline's last query
// (batch set) close the pipeline when they close, which reads the server's end of it,
// before the connection takes the next statement. A failure they end with made pgx drop the
// statement from its cache: failed drops it from the record of cached ones too.
type watchedRows struct {
	pgx.Rows
	batch    pgx.BatchResults
	closeErr error
	failed   func()
}

func (r *watchedRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *watchedRows) Close() {
	r.Rows.Close()
	if r.batch != nil {
		r.closeErr = r.batch.Close()
		r.batch = nil
	}
	if r.failed != nil && r.Err() != nil {
		r.failed()
	}
	r.failed = nil
}

func (r *watchedRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.closeErr
}

// pipelinedRow is QueryRow's answer on a pipeline, read as pgx reads a row.
type pipelinedRow struct {
	rows pgx.Rows
	err  error
}

func (r pipelinedRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	rows := r.rows
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := rows.Scan(dest...); err != nil {
		return err
	}
	rows.Close()
	return rows.Err()
}
