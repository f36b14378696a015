package txmanager

import (
	"context"

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
// not), CopyFrom, and a caller asking for the pgx.Tx itself.
type deferredSession struct {
	pool *pgxpool.Pool
	// ctx is the attempt's context, for a begin that Tx() makes (it takes none).
	ctx      context.Context
	options  pgx.TxOptions // isolation and access mode, for the pipeline's BEGIN
	settings []string      // the SET LOCAL statements queued after it
	// beginQuery is BEGIN and the settings in one string, for a begin of its own.
	beginQuery string
	readOnly   bool

	tx pgx.Tx // nil until the transaction has begun
	// beginErr is why the transaction could not begin: nothing ran, and the attempt fails
	// in the begin phase whatever the callback made of the error.
	beginErr error
}

func (s *deferredSession) DB() DBTX       { return s }
func (s *deferredSession) ReadOnly() bool { return s.readOnly }

// Tx begins the transaction if no statement has yet, and returns pgx's own transaction. If
// it cannot begin, the transaction returned answers every call with pgx.ErrTxClosed and the
// attempt fails with the reason.
func (s *deferredSession) Tx() pgx.Tx {
	s.beginAlone(s.ctx)
	return s.tx
}

// begun reports whether anything reached the server, so there is a transaction to end.
func (s *deferredSession) begun() bool { return s.tx != nil }

// beginAlone begins the transaction in a round trip of its own, unless it has begun.
func (s *deferredSession) beginAlone(ctx context.Context) {
	if s.tx != nil {
		return
	}
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: s.options.IsoLevel, AccessMode: s.options.AccessMode, BeginQuery: s.beginQuery})
	if err != nil {
		s.beginErr = err
		b := &pgx.Batch{}
		b.BeginTx(pgx.TxOptions{})
		s.tx = pgx.FailedBatchResults(b, err).Tx()
		return
	}
	s.tx = tx
}

// pipeline sends BEGIN, the settings and the caller's queries in one batch and reads the
// results of BEGIN and the settings; the caller's results follow in the returned batch.
func (s *deferredSession) pipeline(ctx context.Context, queries []*pgx.QueuedQuery) (pgx.BatchResults, error) {
	b := &pgx.Batch{}
	b.BeginTx(s.options)
	for _, q := range s.settings {
		b.Queue(q)
	}
	b.QueuedQueries = append(b.QueuedQueries, queries...)
	br := s.pool.SendBatch(ctx, b)
	s.tx = br.Tx()
	for range 1 + len(s.settings) {
		if _, err := br.Exec(); err != nil {
			s.beginErr = err
			_ = br.Close()
			return nil, err
		}
	}
	return br, nil
}

func (s *deferredSession) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if s.tx != nil {
		return s.tx.Exec(ctx, sql, args...)
	}
	if len(args) == 0 {
		s.beginAlone(ctx)
		return s.tx.Exec(ctx, sql)
	}
	br, err := s.pipeline(ctx, []*pgx.QueuedQuery{{SQL: sql, Arguments: args}})
	if err != nil {
		return pgconn.CommandTag{}, err
	}
	tag, err := br.Exec()
	if closeErr := br.Close(); err == nil {
		err = closeErr
	}
	return tag, err
}

func (s *deferredSession) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if s.tx != nil {
		return s.tx.Query(ctx, sql, args...)
	}
	br, err := s.pipeline(ctx, []*pgx.QueuedQuery{{SQL: sql, Arguments: args}})
	if err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &pipelinedRows{Rows: rows, batch: br}, nil
}

func (s *deferredSession) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if s.tx != nil {
		return s.tx.QueryRow(ctx, sql, args...)
	}
	rows, err := s.Query(ctx, sql, args...)
	return pipelinedRow{rows: rows, err: err}
}

func (s *deferredSession) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	s.beginAlone(ctx)
	return s.tx.CopyFrom(ctx, table, columns, src)
}

func (s *deferredSession) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if s.tx != nil {
		return s.tx.SendBatch(ctx, b)
	}
	br, err := s.pipeline(ctx, b.QueuedQueries)
	if err != nil {
		return pgx.FailedBatchResults(b, err)
	}
	return br
}

func (s *deferredSession) beginError() error { return s.beginErr }

// commit and rollback end what began: a transaction that never began has nothing to end.
func (s *deferredSession) commit(ctx context.Context) error {
	if !s.begun() {
		return nil
	}
	return s.tx.Commit(ctx)
}

func (s *deferredSession) rollback(ctx context.Context) error {
	if !s.begun() {
		return nil
	}
	return s.tx.Rollback(ctx)
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
