package txmanager_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/lingo-utils/txmanager"
)

// sendRecorder is a pgx tracer that records what each call sent to the server: a query
// ("query: SQL") or a pipeline ("batch: SQL | SQL | ...").
type sendRecorder struct {
	mu    sync.Mutex
	sends []string
}

func (r *sendRecorder) add(s string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sends = append(r.sends, s)
}

func (r *sendRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.sends
	r.sends = nil
	return out
}

func (r *sendRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	r.add("query: " + data.SQL)
	return ctx
}
func (r *sendRecorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *sendRecorder) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	sqls := make([]string, 0, len(data.Batch.QueuedQueries))
	for _, q := range data.Batch.QueuedQueries {
		sqls = append(sqls, q.SQL)
	}
	r.add("batch: " + strings.Join(sqls, " | "))
	return ctx
}
func (r *sendRecorder) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *sendRecorder) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}
func (r *sendRecorder) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceCopyFromStartData) context.Context {
	r.add("copy: " + data.TableName.Sanitize())
	return ctx
}
func (r *sendRecorder) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

func recordSends(r *sendRecorder) func(*pgxpool.Config) {
	return func(c *pgxpool.Config) { c.ConnConfig.Tracer = r }
}

// oneConnection keeps the pool to one connection, so that a transaction finds what the one
// before it left cached there.
func oneConnection(c *pgxpool.Config) { c.MaxConns, c.MinConns = 1, 0 }

const (
	pipelinedBegin = "batch: begin isolation level serializable read write | SET LOCAL lock_timeout = 1000 | "
	beginAlone     = "query: BEGIN ISOLATION LEVEL SERIALIZABLE READ WRITE; SET LOCAL lock_timeout = 1000"
)

// A transaction's BEGIN goes with its first statement where the statement can share a
// pipeline, and alone before it where it cannot, or where the connection has not run the
// statement yet (pgx would parse it ahead of the pipeline, outside the transaction's lock
// timeout: TestAFirstStatementWaitsForALockNoLongerThanTheLockTimeout). Either way the
// transaction has its isolation level and lock timeout from its first statement on,
// commits what it wrote and rolls it all back on an error.
func TestBeginGoesWithTheFirstStatement(t *testing.T) {
	t.Parallel()
	insert := "INSERT INTO item (name) VALUES ($1)"
	tests := []struct {
		name  string
		first func(ctx context.Context, s txmanager.Session) error
		// sent is how the first thing sent to the server starts.
		sent string
	}{
		{"exec with arguments", func(ctx context.Context, s txmanager.Session) error {
			_, err := s.DB().Exec(ctx, insert, "a")
			return err
		}, pipelinedBegin + insert},
		{"query", func(ctx context.Context, s txmanager.Session) error {
			rows, err := s.DB().Query(ctx, insert+" RETURNING id", "a")
			if err != nil {
				return err
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[int])
			if err == nil && len(ids) != 1 {
				err = errors.New("no id returned")
			}
			return err
		}, pipelinedBegin + insert + " RETURNING id"},
		{"query row", func(ctx context.Context, s txmanager.Session) error {
			var id int
			return s.DB().QueryRow(ctx, insert+" RETURNING id", "a").Scan(&id)
		}, pipelinedBegin + insert + " RETURNING id"},
		{"query row without arguments", func(ctx context.Context, s txmanager.Session) error {
			var id int
			return s.DB().QueryRow(ctx, "INSERT INTO item (name) VALUES ('a') RETURNING id").Scan(&id)
		}, pipelinedBegin + "INSERT INTO item (name) VALUES ('a') RETURNING id"},
		{"batch", func(ctx context.Context, s txmanager.Session) error {
			b := &pgx.Batch{}
			b.Queue(insert, "a")
			b.Queue("SELECT count(*) FROM item")
			return s.DB().SendBatch(ctx, b).Close()
		}, pipelinedBegin + insert + " | SELECT count(*) FROM item"},
		// pgx sends an Exec without arguments over the simple protocol, which takes several
		// statements in one string; a pipeline would refuse them.
		{"exec without arguments, two statements", func(ctx context.Context, s txmanager.Session) error {
			_, err := s.DB().Exec(ctx, "INSERT INTO item (name) VALUES ('a'); UPDATE account SET balance = balance + 1 WHERE id = 1")
			return err
		}, beginAlone},
		{"copy", func(ctx context.Context, s txmanager.Session) error {
			_, err := s.DB().CopyFrom(ctx, pgx.Identifier{"item"}, []string{"name"}, pgx.CopyFromRows([][]any{{"a"}}))
			return err
		}, beginAlone},
		{"pgx's transaction", func(ctx context.Context, s txmanager.Session) error {
			_, err := s.Tx().Exec(ctx, insert, "a")
			return err
		}, beginAlone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sends := &sendRecorder{}
			f := newFixture(t, txmanager.Config{}, recordSends(sends), oneConnection)
			opts := txmanager.DefaultOptions().WithTraceName("first")
			opts.Isolation = pgx.Serializable
			sends.take() // the fixture's own statements
			rollBackThenCommit(t, f, opts, tc.first, func(ctx context.Context, s txmanager.Session) error {
				var isolation, lockTimeout string
				if err := s.DB().QueryRow(ctx, "SELECT current_setting('transaction_isolation'), current_setting('lock_timeout')").Scan(&isolation, &lockTimeout); err != nil {
					return err
				}
				if isolation != "serializable" || lockTimeout != "1s" {
					t.Errorf("inside the transaction: isolation %q, lock_timeout %q; want serializable, 1s", isolation, lockTimeout)
				}
				return nil
			}, func(commit bool) {
				// The first run is the statement's first on the connection; the second
				// finds it cached there.
				want := tc.sent
				if !commit {
					want = beginAlone
				}
				sent := sends.take()
				if len(sent) == 0 || !strings.HasPrefix(sent[0], want) {
					t.Errorf("commit=%v: first sent %q, want it to start with %q", commit, sent, want)
				}
			})
		})
	}
}

// rollBackThenCommit runs a transaction of write then check twice: first failing after
// them, then committing. write must add one item. After each run sent (if given) looks at
// what was sent, and the item must be gone after the first run and there after the second.
func rollBackThenCommit(t *testing.T, f *fixture, opts txmanager.TxOptions, write, check func(context.Context, txmanager.Session) error, sent func(commit bool)) {
	t.Helper()
	ctx := context.Background()
	undo := errors.New("undo")
	for _, commit := range []bool{false, true} {
		err := f.manager.WithinTx(ctx, opts, func(ctx context.Context, s txmanager.Session) error {
			if err := write(ctx, s); err != nil {
				return err
			}
			if err := check(ctx, s); err != nil {
				return err
			}
			if !commit {
				return undo
			}
			return nil
		})
		if commit && err != nil || !commit && !errors.Is(err, undo) {
			t.Fatalf("commit=%v: err = %v", commit, err)
		}
		want := 0
		if commit {
			want = 1
		}
		if got := f.count(t, "SELECT count(*) FROM item"); got != want {
			t.Errorf("commit=%v: %d items, want %d", commit, got, want)
		}
		if sent != nil {
			sent(commit)
		}
	}
}

// A transaction of one statement is two round trips: the statement with BEGIN, then COMMIT.
// The first time its connection runs that statement it is three, BEGIN alone first, so
// that the statement is parsed inside the transaction. One that runs no statement sends
// nothing. SeparateBegin brings back BEGIN's own round trip.
func TestRoundTripsOfATransaction(t *testing.T) {
	t.Parallel()
	selectOne := func(ctx context.Context, s txmanager.Session) error {
		var one int
		return s.DB().QueryRow(ctx, "SELECT $1::int", 1).Scan(&one)
	}
	beginAlone := []string{"query: BEGIN ISOLATION LEVEL READ COMMITTED READ WRITE; SET LOCAL lock_timeout = 1000", "query: SELECT $1::int", "query: commit"}
	tests := []struct {
		name string
		cfg  txmanager.Config
		// warm runs fn once before the transaction measured.
		warm bool
		fn   func(ctx context.Context, s txmanager.Session) error
		want []string
	}{
		{"one statement", txmanager.Config{}, true, selectOne,
			[]string{"batch: begin isolation level read committed read write | SET LOCAL lock_timeout = 1000 | SELECT $1::int", "query: commit"}},
		{"one statement, its first on the connection", txmanager.Config{}, false, selectOne, beginAlone},
		{"no statement", txmanager.Config{}, false, func(context.Context, txmanager.Session) error { return nil }, nil},
		{"one statement, BEGIN on its own", txmanager.Config{SeparateBegin: true}, true, selectOne, beginAlone},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sends := &sendRecorder{}
			f := newFixture(t, tc.cfg, recordSends(sends), oneConnection)
			if tc.warm {
				if err := f.manager.WithinTx(context.Background(), txmanager.DefaultOptions(), tc.fn); err != nil {
					t.Fatal(err)
				}
			}
			sends.take()
			if err := f.manager.WithinTx(context.Background(), txmanager.DefaultOptions(), tc.fn); err != nil {
				t.Fatal(err)
			}
			if got := sends.take(); strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("sent %q, want %q", got, tc.want)
			}
		})
	}
}

// A BEGIN that could not be sent with the first statement fails the attempt in the begin
// phase, even when the callback ignores the statement's error: nothing ran, nothing commits.
func TestBeginFailureFailsTheAttemptWhateverTheCallbackDoes(t *testing.T) {
	t.Parallel()
	f := newFixture(t, txmanager.Config{})
	f.pool.Close()
	tests := []struct {
		name string
		fn   func(ctx context.Context, s txmanager.Session) error
	}{
		{"callback returns the error", func(ctx context.Context, s txmanager.Session) error {
			_, err := s.DB().Exec(ctx, "INSERT INTO item (name) VALUES ($1)", "a")
			return err
		}},
		{"callback swallows the error", func(ctx context.Context, s txmanager.Session) error {
			_, _ = s.DB().Exec(ctx, "INSERT INTO item (name) VALUES ($1)", "a")
			return nil
		}},
		{"callback wraps it in its own", func(ctx context.Context, s txmanager.Session) error {
			if _, err := s.DB().Exec(ctx, "INSERT INTO item (name) VALUES ($1)", "a"); err != nil {
				return errors.New("could not insert")
			}
			return nil
		}},
		{"pgx's transaction", func(ctx context.Context, s txmanager.Session) error {
			_, err := s.Tx().Exec(ctx, "INSERT INTO item (name) VALUES ($1)", "a")
			if !errors.Is(err, pgx.ErrTxClosed) {
				t.Errorf("a transaction that could not begin answered %v, want pgx.ErrTxClosed", err)
			}
			return nil
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := f.manager.WithinTx(context.Background(), txmanager.DefaultOptions(), tc.fn)
			var txErr *txmanager.TxError
			if !errors.As(err, &txErr) || txErr.Phase != txmanager.PhaseBegin {
				t.Fatalf("err = %v, want a begin-phase TxError", err)
			}
			if !strings.Contains(err.Error(), "closed pool") {
				t.Errorf("err = %v, want the pool's reason in it", err)
			}
		})
	}
}

// The pipelined BEGIN holds in every way pgx can send queries, the modes a transaction
// pooler needs included: the transaction has its settings, commits its write and rolls back
// on an error.
func TestPipelinedBeginInEveryQueryExecMode(t *testing.T) {
	t.Parallel()
	for _, mode := range []pgx.QueryExecMode{
		pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec,
		pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol,
	} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, txmanager.Config{LockTimeout: 250 * time.Millisecond}, func(c *pgxpool.Config) { c.ConnConfig.DefaultQueryExecMode = mode })
			rollBackThenCommit(t, f, txmanager.DefaultOptions(), func(ctx context.Context, s txmanager.Session) error {
				_, err := s.DB().Exec(ctx, "INSERT INTO item (name) VALUES ($1)", mode.String())
				return err
			}, func(ctx context.Context, s txmanager.Session) error {
				var lockTimeout string
				if err := s.DB().QueryRow(ctx, "SELECT current_setting($1)", "lock_timeout").Scan(&lockTimeout); err != nil {
					return err
				}
				if lockTimeout != "250ms" {
					t.Errorf("lock_timeout inside the transaction = %q, want 250ms", lockTimeout)
				}
				return nil
			}, nil)
		})
	}
}

// A transaction's settings hold inside it from its first statement and end with it; a name
// that is not a parameter's is refused before anything is sent.
func TestSettingsLastForTheTransaction(t *testing.T) {
	t.Parallel()
	f := newFixture(t, txmanager.Config{}, func(c *pgxpool.Config) { c.MaxConns = 1 })
	ctx := context.Background()
	opts := txmanager.DefaultOptions().WithSettings(
		txmanager.Setting{Name: "plan_cache_mode", Value: "force_generic_plan"},
		txmanager.Setting{Name: "application_name", Value: "o'brien"},
	)
	read := func(ctx context.Context, s txmanager.Session) (mode, app string, err error) {
		err = s.DB().QueryRow(ctx, "SELECT current_setting($1), current_setting($2)", "plan_cache_mode", "application_name").Scan(&mode, &app)
		return mode, app, err
	}
	err := f.manager.WithinTx(ctx, opts, func(ctx context.Context, s txmanager.Session) error {
		mode, app, err := read(ctx, s)
		if err == nil && (mode != "force_generic_plan" || app != "o'brien") {
			t.Errorf("inside: plan_cache_mode %q, application_name %q", mode, app)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	err = f.manager.WithinTx(ctx, txmanager.DefaultOptions(), func(ctx context.Context, s txmanager.Session) error {
		mode, app, err := read(ctx, s)
		if err == nil && (mode != "auto" || app == "o'brien") {
			t.Errorf("the next transaction on the same connection: plan_cache_mode %q, application_name %q", mode, app)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	ran := false
	err = f.manager.WithinTx(ctx, txmanager.DefaultOptions().WithSettings(txmanager.Setting{Name: "work_mem = '1GB'; SET x", Value: "1"}),
		func(context.Context, txmanager.Session) error { ran = true; return nil })
	if err == nil || ran || !strings.Contains(err.Error(), "not a run-time parameter") {
		t.Fatalf("a bad setting name: err = %v, callback ran %v", err, ran)
	}
}

// The first statement decides whether a transaction exists: two goroutines racing to run it
// open one (or one of them is refused), never a second that nobody ends; a session kept past
// its attempt answers pgx.ErrTxClosed instead of beginning anew; a first query that cannot
// begin returns rows that answer the error (pgx.CollectRows takes them); and a first
// statement with one of pgx's per-query options runs.
func TestTheFirstStatementOpensOneTransaction(t *testing.T) {
	t.Parallel()
	f := newFixture(t, txmanager.Config{}, func(c *pgxpool.Config) { c.MaxConns = 4 })
	ctx := context.Background()
	for i := range 20 {
		err := f.manager.WithinTx(ctx, txmanager.DefaultOptions(), func(ctx context.Context, s txmanager.Session) error {
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for g := range 2 {
				wg.Go(func() {
					_, errs[g] = s.DB().Exec(ctx, "INSERT INTO item (name) VALUES ($1)", fmt.Sprintf("race-%d-%d", i, g))
				})
			}
			wg.Wait()
			return errors.Join(errs...)
		})
		rows := f.count(t, "SELECT count(*) FROM item WHERE name LIKE $1", fmt.Sprintf("race-%d-%%", i))
		if (err == nil && rows != 2) || (err != nil && rows != 0) {
			t.Fatalf("round %d: err %v with %d rows written, want both rows or none", i, err, rows)
		}
	}
	eventually(t, 5*time.Second, "every connection back in the pool", func() bool { return f.pool.Stat().AcquiredConns() == 0 })
	if open := f.openTransactions(t); open != 0 {
		t.Fatalf("%d transactions left open", open)
	}

	var kept txmanager.Session
	if err := f.manager.WithinTx(ctx, txmanager.DefaultOptions(), func(_ context.Context, s txmanager.Session) error { kept = s; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := kept.DB().Exec(ctx, "INSERT INTO item (name) VALUES ($1)", "after-the-end"); !errors.Is(err, pgx.ErrTxClosed) {
		t.Fatalf("a statement on a session after its attempt: %v, want pgx.ErrTxClosed", err)
	}
	if n := f.count(t, "SELECT count(*) FROM item WHERE name = 'after-the-end'"); n != 0 {
		t.Fatalf("%d rows written after the attempt ended", n)
	}

	err := f.manager.WithinTx(ctx, txmanager.DefaultOptions(), func(ctx context.Context, s txmanager.Session) error {
		var n int
		if err := s.DB().QueryRow(ctx, "SELECT $1::int", pgx.QueryExecModeExec, 7).Scan(&n); err != nil || n != 7 {
			return fmt.Errorf("a first query with a per-query option: %d, %w", n, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	closed := newFixture(t, txmanager.Config{})
	closed.pool.Close()
	err = closed.manager.WithinTx(ctx, txmanager.DefaultOptions(), func(ctx context.Context, s txmanager.Session) error {
		rows, _ := s.DB().Query(ctx, "SELECT $1::int", 1)
		_, err := pgx.CollectRows(rows, pgx.RowTo[int])
		return err
	})
	var txErr *txmanager.TxError
	if !errors.As(err, &txErr) || txErr.Phase != txmanager.PhaseBegin {
		t.Fatalf("collecting a first query that could not begin: %v, want a begin-phase TxError", err)
	}
}

// A deadline that passes before COMMIT is sent is a timeout with nothing committed, not an
// outcome unknown; a caller that leaves while a retry waits is told it was cancelled, not
// that the transaction is worth retrying.
func TestEndingBeforeCommitOrRetry(t *testing.T) {
	t.Parallel()
	f := newFixture(t, txmanager.Config{RetryBaseDelay: 200 * time.Millisecond, RetryMaxDelay: time.Second})
	err := f.manager.WithinTx(context.Background(), txmanager.DefaultOptions().WithTimeout(200*time.Millisecond), func(ctx context.Context, s txmanager.Session) error {
		if _, err := s.DB().Exec(ctx, "INSERT INTO item (name) VALUES ($1)", "late"); err != nil {
			return err
		}
		time.Sleep(300 * time.Millisecond) // work outside the database past the deadline
		return nil
	})
	if !errors.Is(err, txmanager.ErrTxTimeout) || errors.Is(err, txmanager.ErrCommitOutcomeUnknown) {
		t.Fatalf("a deadline before COMMIT: %v, want a timeout and no outcome unknown", err)
	}
	if n := f.count(t, "SELECT count(*) FROM item WHERE name = 'late'"); n != 0 {
		t.Fatalf("%d rows committed after the deadline", n)
	}

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	err = f.manager.WithinTx(ctx, txmanager.DefaultOptions().WithRetries(3), func(ctx context.Context, s txmanager.Session) error {
		_, err := s.DB().Exec(ctx, `DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END $$`)
		return err
	})
	if err == nil || txmanager.IsRetryable(err) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled while a retry waited: %v (retryable %v), want cancelled and not retryable", err, txmanager.IsRetryable(err))
	}
}

// A first statement behind a table another transaction holds locked waits no longer than
// the lock timeout, and fails as a retryable lock_not_available: in every way pgx sends
// queries, whether the connection has the statement cached or not. pgx parses a statement
// new to a connection ahead of the pipeline, outside the transaction and its SET LOCAL
// lock_timeout; such a statement waited for the attempt's whole deadline, then failed as a
// begin timeout, until it began its transaction alone.
func TestAFirstStatementWaitsForALockNoLongerThanTheLockTimeout(t *testing.T) {
	t.Parallel()
	const query = "SELECT count(*) FROM item WHERE id > $1"
	for _, mode := range []pgx.QueryExecMode{
		pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec,
		pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol,
	} {
		for _, cached := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, cached %t", mode, cached), func(t *testing.T) {
				t.Parallel()
				f := newFixture(t, txmanager.Config{DefaultTimeout: 10 * time.Second}, oneConnection,
					func(c *pgxpool.Config) { c.ConnConfig.DefaultQueryExecMode = mode })
				ctx := context.Background()
				count := func(ctx context.Context, s txmanager.Session) error {
					var n int
					return s.DB().QueryRow(ctx, query, 0).Scan(&n)
				}
				opts := txmanager.DefaultOptions().WithLockTimeout(100 * time.Millisecond)
				if cached {
					if err := f.manager.WithinTx(ctx, opts, count); err != nil {
						t.Fatal(err)
					}
				}
				holder, err := pgx.Connect(ctx, f.dsn)
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = holder.Close(ctx) }()
				if _, err := holder.Exec(ctx, "BEGIN; LOCK TABLE item IN ACCESS EXCLUSIVE MODE"); err != nil {
					t.Fatal(err)
				}
				// Twice, without retries: a statement whose parse failed behind the lock is
				// not cached, and the next transaction must not take it for cached.
				for try := range 2 {
					started := time.Now()
					err = f.manager.WithinTx(ctx, opts.WithRetries(0), count)
					elapsed := time.Since(started)
					if !errors.Is(err, txmanager.ErrRetryableTx) || txmanager.SQLState(err) != "55P03" {
						t.Fatalf("try %d, after %s: err = %v, want ErrRetryableTx with SQLSTATE 55P03", try, elapsed, err)
					}
					if elapsed > 5*time.Second {
						t.Fatalf("try %d: the lock wait took %s: the lock timeout did not bound it", try, elapsed)
					}
				}
				if _, err := holder.Exec(ctx, "ROLLBACK"); err != nil {
					t.Fatal(err)
				}
				// Unlocked, the same transaction runs.
				if err := f.manager.WithinTx(ctx, opts, count); err != nil {
					t.Fatalf("after the lock: %v", err)
				}
			})
		}
	}
}

// A setting's value is taken as it is whatever the server's standard_conforming_strings:
// with it off, a backslash escapes the quote after it in a plain string constant, and a
// value holding `\'` ended the constant early and had the rest of it run as SQL. Such a
// value is now sent as an escape string.
func TestASettingsValueIsTakenAsItIs(t *testing.T) {
	t.Parallel()
	for _, conforming := range []string{"on", "off"} {
		t.Run("standard_conforming_strings "+conforming, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, txmanager.Config{}, func(c *pgxpool.Config) { c.ConnConfig.RuntimeParams["standard_conforming_strings"] = conforming })
			for _, value := range []string{`a\'; SET LOCAL statement_timeout = 1; --`, `C:\temp\`, `o'brien \\ \n`} {
				var app, timeout string
				err := f.manager.WithinTx(context.Background(), txmanager.DefaultOptions().WithSettings(txmanager.Setting{Name: "application_name", Value: value}),
					func(ctx context.Context, s txmanager.Session) error {
						return s.DB().QueryRow(ctx, "SELECT current_setting('application_name'), current_setting('statement_timeout')").Scan(&app, &timeout)
					})
				if err != nil || app != value || timeout != "0" {
					t.Fatalf("setting application_name to %q: %v; read %q, statement_timeout %q", value, err, app, timeout)
				}
			}
		})
	}
}
