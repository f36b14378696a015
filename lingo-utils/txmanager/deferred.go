package txmanager

import (
	"context"
	"sync"

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

	// mu guards tx, beginErr and ended: whether the transaction has begun, and whether the
	// attempt ended it.
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
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: s.options.IsoLevel, AccessMode: s.options.AccessMode, BeginQuery: s.beginQuery})
	if err != nil {
		s.beginErr = err
		s.tx = closedTx(err)
		return
	}
	s.tx = tx
}

// pipeline sends BEGIN, the settings and the caller's queries in one batch and reads the
// results of BEGIN and the settings; the caller's results follow in the returned batch.
// Where pgx would parse a query before the batch, it begins the transaction alone on the
// connection instead and returns no batch: the caller runs its queries on s.tx. The caller
// holds the lock.
func (s *deferredSession) pipeline(ctx context.Context, queries []*pgx.QueuedQuery) (pgx.BatchResults, error) {
	b := &pgx.Batch{}
	b.BeginTx(s.options)
	for _, q := range s.settings {
		b.Queue(q)
	}
	b.QueuedQueries = append(b.QueuedQueries, queries...)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		s.beginErr, s.tx = err, closedTx(err)
		return nil, err
	}
	if s.prepared.parsedFirst(conn.Conn(), queries) {
		tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: s.options.IsoLevel, AccessMode: s.options.AccessMode, BeginQuery: s.beginQuery})
		if err != nil {
			conn.Release()
			s.beginErr, s.tx = err, closedTx(err)
			return nil, err
		}
		s.prepared.record(conn.Conn(), queries)
		s.tx = &releasingTx{Tx: tx, conn: conn}
		return nil, nil
	}
	br := sendOn(ctx, conn, b)
	s.tx = &releasingTx{Tx: br.Tx(), conn: conn}
	for range 1 + len(s.settings) {
		if _, err := br.Exec(); err != nil {
			s.beginErr = err
			_ = br.Close()
			return nil, err
		}
	}
	return br, nil
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
		br, err := s.pipeline(ctx, []*pgx.QueuedQuery{{SQL: sql, Arguments: args}})
		if err != nil {
			return pgconn.CommandTag{}, err
		}
		if br != nil {
			tag, err := br.Exec()
			if closeErr := br.Close(); err == nil {
				err = closeErr
			}
			return tag, err
		}
	}
	return s.tx.Exec(ctx, sql, args...)
}

func (s *deferredSession) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	tx, br, err := s.beginForQuery(ctx, []*pgx.QueuedQuery{{SQL: sql, Arguments: args}}, withQueryOptions(args))
	switch {
	case err != nil:
		return errRows(err), err
	case br != nil:
		rows, err := br.Query()
		if err != nil {
			_ = br.Close()
			return rows, err
		}
		return &pipelinedRows{Rows: rows, batch: br}, nil
	}
	return tx.Query(ctx, sql, args...)
}

// beginForQuery is the locked part of a Query or a SendBatch: the transaction it runs on, or
// the pipeline that began it with the queries (their results to be read), or why neither.
// The lock is released by defer: a panic while the first statement's arguments are encoded
// must leave it free, or the attempt's rollback would wait on it for ever.
func (s *deferredSession) beginForQuery(ctx context.Context, queries []*pgx.QueuedQuery, alone bool) (pgx.Tx, pgx.BatchResults, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.tx != nil:
	case s.ended:
		return nil, nil, pgx.ErrTxClosed
	case alone:
		s.beginAlone(ctx)
	default:
		if br, err := s.pipeline(ctx, queries); br != nil || err != nil {
			return nil, br, err
		}
	}
	return s.tx, nil, nil
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
	tx, br, err := s.beginForQuery(ctx, b.QueuedQueries, false)
	switch {
	case err != nil:
		return pgx.FailedBatchResults(b, err)
	case br != nil:
		return br
	}
	return tx.SendBatch(ctx, b)
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

// end marks the session ended and returns its transaction (nil when none began).
func (s *deferredSession) end() pgx.Tx {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ended = true
	return s.tx
}

// pipelinedRows are the rows of a pipeline's last query: closing them closes the pipeline,
// which reads the server's end of it, before the connection takes the next statement.
type pipelinedRows struct {
	pgx.Rows
	batch    pgx.BatchResults
	closeErr error
}

func (r *pipelinedRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *pipelinedRows) Close() {
	r.Rows.Close()
	if r.batch != nil {
		r.closeErr = r.batch.Close()
		r.batch = nil
	}
}

func (r *pipelinedRows) Err() error {
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
