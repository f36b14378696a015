package repositories

import (
	"context"
	"errors"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// withNextStatement holds a statement run with Exec back and sends it with the next one run
// with QueryRow, in one pipeline: two statements in one round trip, the second's snapshot
// taken when the first is done (read committed), and the first's failure the second's.
// Generated queries run on it unchanged.
type withNextStatement struct {
	db   txmanager.DBTX
	held pgx.Batch
}

func (w *withNextStatement) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	w.held.Queue(sql, args...)
	return pgconn.CommandTag{}, nil
}

func (w *withNextStatement) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	held := w.held.Len()
	batch := w.held
	w.held = pgx.Batch{}
	batch.Queue(sql, args...)
	results := w.db.SendBatch(ctx, &batch)
	for range held {
		if _, err := results.Exec(); err != nil {
			_ = results.Close()
			return failedRow{err}
		}
	}
	return closingRow{Row: results.QueryRow(), results: results}
}

// errHeldStatementLost: a Query after a held statement would send the query without it.
var errHeldStatementLost = errors.New("withNextStatement: a held statement is sent with a QueryRow, not a Query")

func (w *withNextStatement) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if w.held.Len() > 0 {
		return nil, errHeldStatementLost
	}
	return w.db.Query(ctx, sql, args...)
}

// closingRow ends the pipeline's results once its row is read.
type closingRow struct {
	pgx.Row
	results pgx.BatchResults
}

func (r closingRow) Scan(dest ...any) error {
	if err := r.Row.Scan(dest...); err != nil {
		_ = r.results.Close()
		return err
	}
	return r.results.Close()
}

type failedRow struct{ err error }

func (r failedRow) Scan(...any) error { return r.err }
