package txmanager_test

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/lingo-utils/txmanager"
)

func insertItem(name string) func(context.Context, txmanager.Session) error {
	return func(ctx context.Context, s txmanager.Session) error {
		_, err := s.DB().Exec(ctx, "INSERT INTO item (name) VALUES ($1)", name)
		return err
	}
}

func TestWithinTxCommitsAndRollsBack(t *testing.T) {
	t.Parallel()
	f := newFixture(t, txmanager.Config{})
	ctx := context.Background()
	errApp := errors.New("application says no")

	tests := []struct {
		name      string
		fn        func(context.Context, txmanager.Session) error
		wantErr   error
		wantRows  int
		wantIsApp bool
	}{
		{name: "commit", fn: insertItem("committed"), wantRows: 1},
		{
			name: "rollback on error",
			fn: func(ctx context.Context, s txmanager.Session) error {
				if err := insertItem("rolled-back")(ctx, s); err != nil {
					return err
				}
				return fmt.Errorf("wrapped: %w", errApp)
			},
			wantErr:  errApp,
			wantRows: 0,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := f.manager.WithinTx(ctx, txmanager.DefaultOptions().WithTraceName(tc.name), tc.fn)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			var txErr *txmanager.TxError
			if tc.wantErr != nil && errors.As(err, &txErr) {
				t.Fatalf("an application error must come back unchanged, got %#v", txErr)
			}
			if got := f.count(t, "SELECT count(*) FROM item"); got != tc.wantRows {
				t.Fatalf("rows = %d, want %d", got, tc.wantRows)
			}
			if _, err := f.pool.Exec(ctx, "DELETE FROM item"); err != nil {
				t.Fatal(err)
			}
		})
	}
	if f.openTransactions(t) != 0 {
		t.Fatal("a transaction was left open")
	}
}

func TestWithinTxRollsBackOnPanicAndRepanics(t *testing.T) {
	t.Parallel()
	f := newFixture(t, txmanager.Config{})
	type boom struct{ msg string }
	var recovered any
	func() {
		defer func() { recovered = recover() }()
		_ = f.manager.WithinTx(context.Background(), txmanager.DefaultOptions(), func(ctx context.Context, s txmanager.Session) error {
			if err := insertItem("panicked")(ctx, s); err != nil {
				return err
			}
			panic(boom{"kaboom"})
		})
	}()
	if got, ok := recovered.(boom); !ok || got.msg != "kaboom" {
		t.Fatalf("recovered %#v, want the original panic value", recovered)
	}
	if got := f.count(t, "SELECT count(*) FROM item"); got != 0 {
		t.Fatalf("rows = %d after panic, want 0", got)
	}
	if stat := f.pool.Stat(); stat.AcquiredConns() != 0 {
		t.Fatalf("connection still acquired after panic: %d", stat.AcquiredConns())
	}
	if got := sumOf(f.collect(t)[txmanager.MetricFailures]); got != 1 {
		t.Fatalf("db.tx.failures = %d after a panic, want 1", got)
	}
}

// singleConnManager is a manager over one connection of its own to f's database (a
// *pgx.Conn, not a pool).
func singleConnManager(t *testing.T, f *fixture) (*pgx.Conn, txmanager.Manager) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	component, err := txmanager.NewComponentWithDependencies(txmanager.Config{}, conn, txmanager.Dependencies{})
	if err != nil {
		t.Fatal(err)
	}
	return conn, component.Manager
}

// panickingValue panics when pgx encodes it (a driver.Valuer with a bug).
type panickingValue struct{}

func (panickingValue) Value() (driver.Value, error) { panic("a value that cannot be encoded") }

// A panic while the first statement's arguments are encoded (before the transaction has
// begun, in the pipeline that begins it) is re-raised like any panic of the callback: the
// session's lock is not left held for the rollback to wait on for ever.
func TestAPanicInTheFirstStatementIsReRaised(t *testing.T) {
	t.Parallel()
	f := newFixture(t, txmanager.Config{})
	statements := []struct {
		name string
		run  func(ctx context.Context, s txmanager.Session)
	}{
		{"QueryRow", func(ctx context.Context, s txmanager.Session) {
			var n int
			_ = s.DB().QueryRow(ctx, "SELECT length($1::text)", panickingValue{}).Scan(&n)
		}},
		{"SendBatch", func(ctx context.Context, s txmanager.Session) {
			b := &pgx.Batch{}
			b.Queue("SELECT length($1::text)", panickingValue{})
			_ = s.DB().SendBatch(ctx, b).Close()
		}},
	}
	for _, st := range statements {
		t.Run(st.name, func(t *testing.T) {
			done := make(chan any, 1)
			go func() {
				defer func() { done <- recover() }()
				_ = f.manager.WithinTx(context.Background(), txmanager.DefaultOptions(), func(ctx context.Context, s txmanager.Session) error {
					st.run(ctx, s)
					return nil
				})
			}()
			select {
			case recovered := <-done:
				if recovered == nil {
					t.Fatal("the panic was not re-raised")
				}
			case <-time.After(10 * time.Second):
				t.Fatal("WithinTx did not return within 10 s of a panic in its first statement")
			}
		})
	}
}

// lockInOppositeOrder makes two transactions deadlock: each locks its first row, waits for
// the other, then locks the other's row. Only the first attempt waits at the barrier, so a
// retried victim runs straight through.
func lockInOppositeOrder(t *testing.T, f *fixture, opts txmanager.TxOptions) [2]error {
	t.Helper()
	var barrier sync.WaitGroup
	barrier.Add(2)
	var errs [2]error
	var wg sync.WaitGroup
	for i, order := range [2][2]int{{1, 2}, {2, 1}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			attempt := 0
			errs[i] = f.manager.WithinTx(context.Background(), opts, func(ctx context.Context, s txmanager.Session) error {
				attempt++
				if _, err := s.DB().Exec(ctx, "UPDATE account SET balance = balance + 1 WHERE id = $1", order[0]); err != nil {
					return err
				}
				if attempt == 1 {
					barrier.Done()
					barrier.Wait()
				}
				_, err := s.DB().Exec(ctx, "UPDATE account SET balance = balance - 1 WHERE id = $1", order[1])
				return err
			})
		}()
	}
	wg.Wait()
	return errs
}

func TestDeadlockIsRetryable(t *testing.T) {
	t.Parallel()
	// lock_timeout off: the server's deadlock detector, not the lock timeout, must fire.
	f := newFixture(t, txmanager.Config{LockTimeout: -1, DefaultTimeout: 20 * time.Second})

	t.Run("classified without retries", func(t *testing.T) {
		errs := lockInOppositeOrder(t, f, txmanager.DefaultOptions().WithTraceName("deadlock"))
		failed := 0
		for _, err := range errs {
			if err == nil {
				continue
			}
			failed++
			if !errors.Is(err, txmanager.ErrRetryableTx) || txmanager.SQLState(err) != "40P01" {
				t.Fatalf("err = %v, want ErrRetryableTx with SQLSTATE 40P01", err)
			}
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) {
				t.Fatalf("original *pgconn.PgError not reachable from %v", err)
			}
		}
		if failed != 1 {
			t.Fatalf("%d transactions failed, want exactly the deadlock victim", failed)
		}
	})
	t.Run("succeeds under the retry loop", func(t *testing.T) {
		before := sumOf(f.collect(t)[txmanager.MetricRetries])
		errs := lockInOppositeOrder(t, f, txmanager.DefaultOptions().WithTraceName("deadlock").WithRetries(3))
		for _, err := range errs {
			if err != nil {
				t.Fatalf("err = %v, want both to succeed", err)
			}
		}
		if got := sumOf(f.collect(t)[txmanager.MetricRetries]) - before; got < 1 {
			t.Fatalf("db.tx.retries grew by %d, want at least 1", got)
		}
		// Two rounds, each +1/-1 per account per successful transaction: balances unchanged.
		if got := f.count(t, "SELECT sum(balance) FROM account"); got != 200 {
			t.Fatalf("sum(balance) = %d, want 200", got)
		}
	})
}

// writeSkew runs two SERIALIZABLE transactions that each read the whole table and insert a
// row derived from it, so one of them must fail with 40001.
func writeSkew(t *testing.T, f *fixture, opts txmanager.TxOptions) [2]error {
	t.Helper()
	var barrier sync.WaitGroup
	barrier.Add(2)
	var errs [2]error
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			attempt := 0
			errs[i] = f.manager.WithinTx(context.Background(), opts, func(ctx context.Context, s txmanager.Session) error {
				attempt++
				var n int
				if err := s.DB().QueryRow(ctx, "SELECT count(*) FROM item").Scan(&n); err != nil {
					return err
				}
				if attempt == 1 {
					barrier.Done()
					barrier.Wait()
				}
				_, err := s.DB().Exec(ctx, "INSERT INTO item (name) VALUES ($1)", fmt.Sprintf("skew-%d-%d-%d", i, n, attempt))
				return err
			})
		}()
	}
	wg.Wait()
	return errs
}

func TestSerializationFailureIsRetryable(t *testing.T) {
	t.Parallel()
	f := newFixture(t, txmanager.Config{})

	t.Run("classified without retries", func(t *testing.T) {
		errs := writeSkew(t, f, txmanager.SerializableOptions().WithRetries(0))
		failed := 0
		for _, err := range errs {
			if err == nil {
				continue
			}
			failed++
			if !errors.Is(err, txmanager.ErrRetryableTx) || txmanager.SQLState(err) != "40001" {
				t.Fatalf("err = %v, want ErrRetryableTx with SQLSTATE 40001", err)
			}
		}
		if failed != 1 {
			t.Fatalf("%d transactions failed, want 1", failed)
		}
	})
	t.Run("succeeds under the retry loop", func(t *testing.T) {
		before := f.count(t, "SELECT count(*) FROM item")
		errs := writeSkew(t, f, txmanager.SerializableOptions())
		for _, err := range errs {
			if err != nil {
				t.Fatalf("err = %v, want both to succeed", err)
			}
		}
		if got := f.count(t, "SELECT count(*) FROM item") - before; got != 2 {
			t.Fatalf("%d rows inserted, want 2", got)
		}
	})
}

func TestLockTimeoutIsRetryable(t *testing.T) {
	t.Parallel()
	f := newFixture(t, txmanager.Config{})
	ctx := context.Background()
	holder, err := f.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if _, err := holder.Exec(ctx, "SELECT * FROM account WHERE id = 1 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	started := time.Now()
	err = f.manager.WithinTx(ctx, txmanager.DefaultOptions().WithLockTimeout(100*time.Millisecond), func(ctx context.Context, s txmanager.Session) error {
		_, err := s.DB().Exec(ctx, "UPDATE account SET balance = 0 WHERE id = 1")
		return err
	})
	if !errors.Is(err, txmanager.ErrRetryableTx) || txmanager.SQLState(err) != "55P03" {
		t.Fatalf("err = %v, want ErrRetryableTx with SQLSTATE 55P03", err)
	}
	if elapsed := time.Since(started); elapsed > 3*time.Second {
		t.Fatalf("lock wait took %s: lock_timeout was not applied", elapsed)
	}
}

func TestTimeoutEndsTransactionWithoutLeaks(t *testing.T) {
	t.Parallel()
	f := newFixture(t, txmanager.Config{})
	tests := []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		opts txmanager.TxOptions
	}{
		{
			name: "option timeout",
			ctx:  func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) },
			opts: txmanager.DefaultOptions().WithTimeout(200 * time.Millisecond),
		},
		{
			name: "shorter caller deadline wins",
			ctx: func() (context.Context, context.CancelFunc) {
				return context.WithTimeout(context.Background(), 200*time.Millisecond)
			},
			opts: txmanager.DefaultOptions().WithTimeout(time.Minute),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := tc.ctx()
			defer cancel()
			started := time.Now()
			err := f.manager.WithinTx(ctx, tc.opts, func(ctx context.Context, s txmanager.Session) error {
				if err := insertItem("sleeper-"+tc.name)(ctx, s); err != nil {
					return err
				}
				_, err := s.DB().Exec(ctx, "SELECT pg_sleep(5)")
				return err
			})
			if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, txmanager.ErrTxTimeout) {
				t.Fatalf("err = %v, want a deadline error", err)
			}
			if elapsed := time.Since(started); elapsed > 3*time.Second {
				t.Fatalf("returned after %s, want about 200ms", elapsed)
			}
			eventually(t, 5*time.Second, "no open transaction and no acquired connection", func() bool {
				return f.openTransactions(t) == 0 && f.pool.Stat().AcquiredConns() == 0
			})
			if got := f.count(t, "SELECT count(*) FROM item"); got != 0 {
				t.Fatalf("rows = %d, want 0", got)
			}
		})
	}
}

func TestCallerCancellationStillRollsBack(t *testing.T) {
	t.Parallel()
	f := newFixture(t, txmanager.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	err := f.manager.WithinTx(ctx, txmanager.DefaultOptions(), func(ctx context.Context, s txmanager.Session) error {
		if err := insertItem("cancelled")(ctx, s); err != nil {
			return err
		}
		cancel()
		return ctx.Err()
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	eventually(t, 5*time.Second, "transaction rolled back", func() bool {
		return f.openTransactions(t) == 0 && f.pool.Stat().AcquiredConns() == 0
	})
	if got := f.count(t, "SELECT count(*) FROM item"); got != 0 {
		t.Fatalf("rows = %d, want 0", got)
	}
}

func TestReadOnlyTxRejectsWrites(t *testing.T) {
	t.Parallel()
	f := newFixture(t, txmanager.Config{})
	ctx := context.Background()
	var balance int
	err := f.manager.WithinReadOnlyTx(ctx, txmanager.DefaultOptions(), func(ctx context.Context, s txmanager.Session) error {
		if !s.ReadOnly() {
			t.Error("session does not report read-only")
		}
		return s.DB().QueryRow(ctx, "SELECT balance FROM account WHERE id = 1").Scan(&balance)
	})
	if err != nil || balance != 100 {
		t.Fatalf("read: balance=%d err=%v", balance, err)
	}
	// Even options asking for read-write are forced to read-only.
	err = f.manager.WithinReadOnlyTx(ctx, txmanager.DefaultOptions(), insertItem("sneaky"))
	if txmanager.SQLState(err) != "25006" {
		t.Fatalf("err = %v, want SQLSTATE 25006", err)
	}
	if f.count(t, "SELECT count(*) FROM item") != 0 {
		t.Fatal("a write landed through a read-only transaction")
	}
}

func TestConstraintViolationsAreConflicts(t *testing.T) {
	t.Parallel()
	f := newFixture(t, txmanager.Config{})
	ctx := context.Background()
	if err := f.manager.WithinTx(ctx, txmanager.DefaultOptions(), insertItem("dup")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		sql       string
		wantState string
	}{
		{"unique violation", "INSERT INTO item (name) VALUES ('dup')", "23505"},
		{"foreign key violation", "INSERT INTO item (name, account_id) VALUES ('orphan', 42)", "23503"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := f.manager.WithinTx(ctx, txmanager.DefaultOptions().WithRetries(5), func(ctx context.Context, s txmanager.Session) error {
				_, err := s.DB().Exec(ctx, tc.sql)
				return err
			})
			if !errors.Is(err, txmanager.ErrConflict) || errors.Is(err, txmanager.ErrRetryableTx) {
				t.Fatalf("err = %v, want ErrConflict (not retryable)", err)
			}
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != tc.wantState {
				t.Fatalf("SQLSTATE = %v, want %s", pgErr, tc.wantState)
			}
		})
	}
}

func TestNestedWithinTxIsRefused(t *testing.T) {
	t.Parallel()
	f := newFixture(t, txmanager.Config{})
	ctx := context.Background()
	if txmanager.InTx(ctx) {
		t.Fatal("background context reported as inside a transaction")
	}
	var nestedErr error
	err := f.manager.WithinTx(ctx, txmanager.DefaultOptions(), func(ctx context.Context, s txmanager.Session) error {
		if !txmanager.InTx(ctx) {
			t.Error("callback context not marked as inside a transaction")
		}
		nestedErr = f.manager.WithinTx(ctx, txmanager.DefaultOptions(), insertItem("inner"))
		// The outer transaction is untouched by the refused inner call.
		return insertItem("outer")(ctx, s)
	})
	if err != nil {
		t.Fatalf("outer: %v", err)
	}
	if !errors.Is(nestedErr, txmanager.ErrNestedTx) {
		t.Fatalf("nested err = %v, want ErrNestedTx", nestedErr)
	}
	if got := f.count(t, "SELECT count(*) FROM item WHERE name = 'outer'"); got != 1 {
		t.Fatalf("outer rows = %d, want 1", got)
	}
	if got := f.count(t, "SELECT count(*) FROM item WHERE name = 'inner'"); got != 0 {
		t.Fatalf("inner rows = %d, want 0", got)
	}
}

// A manager on another database runs its own transaction inside one of this manager's (a
// service with two databases), and nesting on either database is still refused inside it.
// Before, any transaction of the package in the context refused every manager's.
func TestATransactionOnAnotherDatabaseRunsInside(t *testing.T) {
	t.Parallel()
	first, second := newFixture(t, txmanager.Config{}), newFixture(t, txmanager.Config{})
	ctx := context.Background()
	var innerErr, nestedFirst, nestedSecond error
	err := first.manager.WithinTx(ctx, txmanager.DefaultOptions(), func(ctx context.Context, s txmanager.Session) error {
		innerErr = second.manager.WithinTx(ctx, txmanager.DefaultOptions(), func(ctx context.Context, s2 txmanager.Session) error {
			nestedFirst = first.manager.WithinTx(ctx, txmanager.DefaultOptions(), insertItem("nested-first"))
			nestedSecond = second.manager.WithinTx(ctx, txmanager.DefaultOptions(), insertItem("nested-second"))
			return insertItem("second")(ctx, s2)
		})
		return insertItem("first")(ctx, s)
	})
	if err != nil || innerErr != nil {
		t.Fatalf("outer: %v; inner on the other database: %v", err, innerErr)
	}
	if !errors.Is(nestedFirst, txmanager.ErrNestedTx) || !errors.Is(nestedSecond, txmanager.ErrNestedTx) {
		t.Fatalf("nested on the first database: %v; on the second: %v; want ErrNestedTx for both", nestedFirst, nestedSecond)
	}
	if a, b := first.count(t, "SELECT count(*) FROM item WHERE name = 'first'"), second.count(t, "SELECT count(*) FROM item WHERE name = 'second'"); a != 1 || b != 1 {
		t.Fatalf("rows: %d on the first database, %d on the second; want 1 each", a, b)
	}

	// An outer attempt that fails for a reason that passes after its inner transaction
	// committed is not run again: the retry would commit the inner one a second time.
	runs := 0
	err = first.manager.WithinTx(ctx, txmanager.DefaultOptions().WithRetries(3), func(ctx context.Context, s txmanager.Session) error {
		runs++
		if err := second.manager.WithinTx(ctx, txmanager.DefaultOptions(), insertItem(fmt.Sprintf("inner-%d", runs))); err != nil {
			return err
		}
		return &pgconn.PgError{Code: "40001", Message: "could not serialize access"}
	})
	if err == nil || txmanager.IsRetryable(err) || runs != 1 || !strings.Contains(err.Error(), "committed inside") {
		t.Fatalf("outer failing after its inner commit: err = %v (retryable %v) after %d runs; want a final failure after one", err, txmanager.IsRetryable(err), runs)
	}
	if got := second.count(t, "SELECT count(*) FROM item WHERE name LIKE 'inner-%'"); got != 1 {
		t.Fatalf("the inner transaction committed %d times, want once", got)
	}

	// An inner transaction that cannot have written anything leaves the outer free to run
	// again; one whose commit may have happened does not.
	inner := []struct {
		name string
		run  func(ctx context.Context, attempt int) error
		// again: the outer attempt runs again after its retryable failure.
		again bool
	}{
		{"a read-only transaction", func(ctx context.Context, _ int) error {
			return second.manager.WithinReadOnlyTx(ctx, txmanager.DefaultOptions(), func(ctx context.Context, s txmanager.Session) error {
				var n int
				return s.DB().QueryRow(ctx, "SELECT count(*) FROM item").Scan(&n)
			})
		}, true},
		{"a callback that ran no statement", func(ctx context.Context, _ int) error {
			return second.manager.WithinTx(ctx, txmanager.DefaultOptions(), func(context.Context, txmanager.Session) error { return nil })
		}, true},
		{"a write that failed", func(ctx context.Context, attempt int) error {
			_ = second.manager.WithinTx(ctx, txmanager.DefaultOptions(), func(ctx context.Context, s txmanager.Session) error {
				if err := insertItem(fmt.Sprintf("rolled-back-%d", attempt))(ctx, s); err != nil {
					return err
				}
				return errors.New("the callback gives up")
			})
			return nil
		}, true},
		{"pgx's transaction handed to the callback, whose attempt failed", func(ctx context.Context, attempt int) error {
			_ = second.manager.WithinTx(ctx, txmanager.DefaultOptions(), func(ctx context.Context, s txmanager.Session) error {
				if err := s.Tx().Commit(ctx); err != nil {
					return err
				}
				return errors.New("after committing it")
			})
			return nil
		}, false},
	}
	for _, tc := range inner {
		runs := 0
		err := first.manager.WithinTx(ctx, txmanager.DefaultOptions().WithRetries(1), func(ctx context.Context, s txmanager.Session) error {
			runs++
			if err := tc.run(ctx, runs); err != nil {
				return err
			}
			return &pgconn.PgError{Code: "40001", Message: "could not serialize access"}
		})
		if wantRuns := map[bool]int{true: 2, false: 1}[tc.again]; runs != wantRuns || err == nil {
			t.Errorf("%s inside: the outer ran %d times (%v), want %d", tc.name, runs, err, wantRuns)
		}
	}
}

func TestHundredConcurrentTransactionsOnPoolOfTen(t *testing.T) {
	t.Parallel()
	f := newFixture(t, txmanager.Config{DefaultTimeout: 30 * time.Second}, func(c *pgxpool.Config) { c.MaxConns = 10 })
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- f.manager.WithinTx(context.Background(), txmanager.DefaultOptions(), func(ctx context.Context, s txmanager.Session) error {
				if _, err := s.DB().Exec(ctx, "SELECT pg_sleep(0.01)"); err != nil {
					return err
				}
				return insertItem(fmt.Sprintf("c-%d", i))(ctx, s)
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent transaction failed: %v", err)
		}
	}
	if got := f.count(t, "SELECT count(*) FROM item"); got != 100 {
		t.Fatalf("rows = %d, want 100", got)
	}
	if stat := f.pool.Stat(); stat.MaxConns() != 10 || stat.AcquiredConns() != 0 {
		t.Fatalf("pool max=%d acquired=%d, want 10 and 0", stat.MaxConns(), stat.AcquiredConns())
	}
	if got := sumOf(f.collect(t)[txmanager.MetricActive]); got != 0 {
		t.Fatalf("db.tx.active = %d after all finished, want 0", got)
	}
}

func TestRetryStopsAtDeadlineAndOnlyForRetryableClasses(t *testing.T) {
	t.Parallel()
	raise := func(state string) func(context.Context, txmanager.Session) error {
		return func(ctx context.Context, s txmanager.Session) error {
			_, err := s.DB().Exec(ctx, fmt.Sprintf("DO $$ BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = '%s'; END $$", state))
			return err
		}
	}
	tests := []struct {
		name         string
		cfg          txmanager.Config
		ctxTimeout   time.Duration
		failAttempts int // attempts that raise before the callback succeeds
		state        string
		retries      int
		wantAttempts int
		wantErr      error
	}{
		{name: "transient failure then success", state: "40001", failAttempts: 2, retries: 3, wantAttempts: 3},
		{name: "gives up after max retries", state: "40P01", failAttempts: 10, retries: 2, wantAttempts: 3, wantErr: txmanager.ErrRetryableTx},
		{name: "non-retryable class runs once", state: "22012", failAttempts: 10, retries: 5, wantAttempts: 1},
		{
			name:         "backoff would cross the deadline",
			cfg:          txmanager.Config{RetryBaseDelay: 2 * time.Second, RetryMaxDelay: 2 * time.Second},
			ctxTimeout:   500 * time.Millisecond,
			state:        "40001",
			failAttempts: 10, retries: 5, wantAttempts: 1, wantErr: txmanager.ErrRetryableTx,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, tc.cfg)
			ctx := context.Background()
			if tc.ctxTimeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.ctxTimeout)
				defer cancel()
			}
			attempts := 0
			started := time.Now()
			err := f.manager.WithinTx(ctx, txmanager.DefaultOptions().WithRetries(tc.retries), func(ctx context.Context, s txmanager.Session) error {
				attempts++
				if attempts <= tc.failAttempts {
					return raise(tc.state)(ctx, s)
				}
				return insertItem("done")(ctx, s)
			})
			if attempts != tc.wantAttempts {
				t.Fatalf("attempts = %d, want %d (err %v)", attempts, tc.wantAttempts, err)
			}
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr == nil && tc.failAttempts < tc.wantAttempts && err != nil {
				t.Fatalf("err = %v, want success", err)
			}
			if tc.ctxTimeout > 0 && time.Since(started) > tc.ctxTimeout {
				t.Fatalf("ran %s, past the caller's deadline of %s", time.Since(started), tc.ctxTimeout)
			}
		})
	}
}

func TestCommitOutcomeUnknownWhenCommitReplyIsLost(t *testing.T) {
	t.Parallel()
	f := newFixture(t, txmanager.Config{})
	ctx := context.Background()
	manager, proxy, _ := f.behindReplyDroppingProxy(t)
	attempts := 0
	err := manager.WithinTx(ctx, txmanager.DefaultOptions().WithRetries(3), func(ctx context.Context, s txmanager.Session) error {
		attempts++
		if err := insertItem("maybe")(ctx, s); err != nil {
			return err
		}
		proxy.dropNextReply() // the next thing the server says is its answer to COMMIT
		return nil
	})
	if !errors.Is(err, txmanager.ErrCommitOutcomeUnknown) || errors.Is(err, txmanager.ErrRetryableTx) {
		t.Fatalf("err = %v, want ErrCommitOutcomeUnknown and not retryable", err)
	}
	if attempts != 1 {
		t.Fatalf("attempts = %d: an unknown commit outcome must never be retried", attempts)
	}
	// The server did commit: exactly why the outcome had to be reported as unknown.
	if got := f.count(t, "SELECT count(*) FROM item WHERE name = 'maybe'"); got != 1 {
		t.Fatalf("rows = %d, want 1 (the commit landed)", got)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		cfg     txmanager.Config
		wantErr bool
	}{
		{"zero value", txmanager.Config{}, false},
		{"serializable", txmanager.Config{DefaultIsolation: "serializable"}, false},
		{"unknown isolation", txmanager.Config{DefaultIsolation: "snapshot"}, true},
		{"negative delay", txmanager.Config{RetryBaseDelay: -time.Second}, true},
		{"base above max", txmanager.Config{RetryBaseDelay: time.Second, RetryMaxDelay: time.Millisecond}, true},
	}
	for _, tc := range tests {
		if err := tc.cfg.Check(); (err != nil) != tc.wantErr {
			t.Errorf("%s: Check() = %v, wantErr %v", tc.name, err, tc.wantErr)
		}
	}
	if _, err := txmanager.NewComponentWithDependencies(txmanager.Config{}, nil, txmanager.Dependencies{}); err == nil {
		t.Error("a nil database was accepted")
	}
}

var _ txmanager.Beginner = (*pgx.Conn)(nil)

// A client that goes silent inside a transaction (frozen, or its network gone) must not
// hold its locks for ever: with IdleInTransactionTimeout the server ends its session.
func TestIdleInTransactionTimeoutReleasesLocks(t *testing.T) {
	t.Parallel()
	f := newFixture(t, txmanager.Config{IdleInTransactionTimeout: 300 * time.Millisecond, DefaultTimeout: 10 * time.Second})
	ctx := context.Background()
	err := f.manager.WithinTx(ctx, txmanager.DefaultOptions(), func(ctx context.Context, s txmanager.Session) error {
		if _, err := s.DB().Exec(ctx, "SELECT * FROM account WHERE id = 1 FOR UPDATE"); err != nil {
			return err
		}
		// Meanwhile, another session can take the lock once the server ends this one.
		got := make(chan error, 1)
		go func() {
			_, err := f.pool.Exec(context.Background(), "UPDATE account SET balance = 7 WHERE id = 1")
			got <- err
		}()
		select {
		case err := <-got:
			if err != nil {
				t.Errorf("other session: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Error("the idle transaction still holds its lock after 5s")
		}
		_, err := s.DB().Exec(ctx, "SELECT 1")
		return err
	})
	if err == nil {
		t.Fatal("the transaction the server ended still committed")
	}
	if got := f.count(t, "SELECT balance FROM account WHERE id = 1"); got != 7 {
		t.Fatalf("balance = %d, want the other session's 7", got)
	}
}

// terminateBackend ends the backend with pid from another connection, as a failover or an
// operator does, and waits until it is gone.
func terminateBackend(t *testing.T, f *fixture, pid uint32) {
	t.Helper()
	admin, err := pgx.Connect(context.Background(), f.dsn)
	if err != nil {
		t.Error(err)
		return
	}
	defer admin.Close(context.Background())
	var ok bool
	if err := admin.QueryRow(context.Background(), "SELECT pg_terminate_backend($1, 5000)", int(pid)).Scan(&ok); err != nil || !ok {
		t.Errorf("terminate backend %d: %v %v", pid, ok, err)
	}
}

// A session the server ended before COMMIT (SQLSTATE 57P01, "terminating connection due to
// administrator command") committed nothing: the transaction is retryable and runs again on
// a fresh connection. Ended at COMMIT, its outcome is unknown and it is not retried.
func TestServerEndedSessions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("at begin: a pooled connection whose backend was terminated", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, txmanager.Config{}, func(c *pgxpool.Config) { c.MaxConns = 1 })
		conn, err := f.pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pid := conn.Conn().PgConn().PID()
		conn.Release()
		terminateBackend(t, f, pid)
		attempts := 0
		err = f.manager.WithinTx(ctx, txmanager.DefaultOptions().WithRetries(2), func(ctx context.Context, s txmanager.Session) error {
			attempts++
			return insertItem("after-terminate")(ctx, s)
		})
		if err != nil {
			t.Fatalf("WithinTx after the pooled backend was terminated: %v", err)
		}
		if got := f.count(t, "SELECT count(*) FROM item WHERE name = 'after-terminate'"); got != 1 {
			t.Fatalf("rows = %d, want 1", got)
		}
	})
	t.Run("inside the callback", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, txmanager.Config{})
		attempts := 0
		err := f.manager.WithinTx(ctx, txmanager.DefaultOptions().WithRetries(2), func(ctx context.Context, s txmanager.Session) error {
			attempts++
			if err := insertItem("once")(ctx, s); err != nil {
				return err
			}
			if attempts == 1 {
				terminateBackend(t, f, s.Tx().Conn().PgConn().PID())
				// The next statement meets the ended session.
				_, err := s.DB().Exec(ctx, "SELECT 1")
				if txmanager.SQLState(err) != "57P01" {
					t.Errorf("statement after termination: %v (SQLSTATE %q), want 57P01", err, txmanager.SQLState(err))
				}
				return err
			}
			return nil
		})
		if err != nil || attempts != 2 {
			t.Fatalf("err = %v after %d attempts, want success on the second", err, attempts)
		}
		if got := f.count(t, "SELECT count(*) FROM item WHERE name = 'once'"); got != 1 {
			t.Fatalf("rows = %d, want exactly 1 (the first attempt committed nothing)", got)
		}
	})
	t.Run("at commit", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, txmanager.Config{})
		attempts := 0
		err := f.manager.WithinTx(ctx, txmanager.DefaultOptions().WithRetries(3), func(ctx context.Context, s txmanager.Session) error {
			attempts++
			if err := insertItem("unknown")(ctx, s); err != nil {
				return err
			}
			// Ended after the last statement: COMMIT is what meets it.
			terminateBackend(t, f, s.Tx().Conn().PgConn().PID())
			return nil
		})
		if !errors.Is(err, txmanager.ErrCommitOutcomeUnknown) || errors.Is(err, txmanager.ErrRetryableTx) {
			t.Fatalf("err = %v, want ErrCommitOutcomeUnknown and not retryable", err)
		}
		if attempts != 1 {
			t.Fatalf("attempts = %d: an unknown commit outcome must never be retried", attempts)
		}
	})
}

// A setting the server refuses fails its transaction without leaving a single connection
// inside it: BEGIN went with the settings in one query and had run, so without a rollback
// the connection would answer every later transaction "current transaction is aborted".
func TestARefusedSettingLeavesTheConnectionUsable(t *testing.T) {
	t.Parallel()
	f := newFixture(t, txmanager.Config{})
	ctx := context.Background()
	conn, manager := singleConnManager(t, f)
	tests := []struct {
		name    string
		setting txmanager.Setting
	}{
		{"a value the parameter refuses", txmanager.Setting{Name: "lock_timeout", Value: "soon"}},
		{"a parameter the server does not have", txmanager.Setting{Name: "no_such_parameter", Value: "1"}},
	}
	for _, tc := range tests {
		ran := false
		err := manager.WithinTx(ctx, txmanager.DefaultOptions().WithSettings(tc.setting),
			func(context.Context, txmanager.Session) error { ran = true; return nil })
		if err == nil || ran {
			t.Fatalf("%s: err = %v, callback ran %v; want the server's refusal before the callback", tc.name, err, ran)
		}
		if status := conn.PgConn().TxStatus(); status != 'I' {
			t.Fatalf("%s: the connection is left in transaction state %q, want idle", tc.name, status)
		}
		var one int
		err = manager.WithinTx(ctx, txmanager.DefaultOptions(), func(ctx context.Context, s txmanager.Session) error {
			return s.DB().QueryRow(ctx, "SELECT 1").Scan(&one)
		})
		if err != nil || one != 1 {
			t.Fatalf("%s: the next transaction on the connection: %v (got %d)", tc.name, err, one)
		}
	}
}

// Settings cannot change what the options say the transaction is: a read-only transaction
// made writable, or another isolation than its spans and metrics report. They are refused
// before anything runs; the options set those.
func TestSettingsCannotChangeTheTransactionsMode(t *testing.T) {
	t.Parallel()
	f := newFixture(t, txmanager.Config{})
	ctx := context.Background()
	tests := []struct {
		name    string
		within  func(context.Context, txmanager.TxOptions, func(context.Context, txmanager.Session) error) error
		opts    txmanager.TxOptions
		setting txmanager.Setting
	}{
		{"a read-only transaction made writable", f.manager.WithinReadOnlyTx, txmanager.ReadOnlyOptions(), txmanager.Setting{Name: "transaction_read_only", Value: "off"}},
		{"another isolation", f.manager.WithinTx, txmanager.SerializableOptions(), txmanager.Setting{Name: "transaction_isolation", Value: "read committed"}},
		{"the next transactions' default", f.manager.WithinTx, txmanager.DefaultOptions(), txmanager.Setting{Name: "Default_Transaction_Read_Only", Value: "on"}},
	}
	for _, tc := range tests {
		ran := false
		err := tc.within(ctx, tc.opts.WithSettings(tc.setting), func(ctx context.Context, s txmanager.Session) error {
			ran = true
			_, err := s.DB().Exec(ctx, "INSERT INTO item (name) VALUES ($1)", "mode")
			return err
		})
		if err == nil || ran || !strings.Contains(err.Error(), tc.setting.Name) {
			t.Fatalf("%s: %v (callback ran %v), want a refusal naming the setting before anything runs", tc.name, err, ran)
		}
	}
	if got := f.count(t, "SELECT count(*) FROM item WHERE name = 'mode'"); got != 0 {
		t.Fatalf("%d rows written", got)
	}
}

// A callback that swallows a statement's error and returns nil gets the server's rollback
// at COMMIT as a *TxError of the commit phase, not a bare pgx error that reads as its own
// application error: nothing committed, and it says why.
func TestARollbackAtCommitIsATxError(t *testing.T) {
	t.Parallel()
	f := newFixture(t, txmanager.Config{})
	err := f.manager.WithinTx(context.Background(), txmanager.DefaultOptions(), func(ctx context.Context, s txmanager.Session) error {
		if err := insertItem("kept")(ctx, s); err != nil {
			return err
		}
		_, _ = s.DB().Exec(ctx, "INSERT INTO no_such_table VALUES ($1)", 1) // fails; the callback goes on
		return nil
	})
	var txErr *txmanager.TxError
	if !errors.As(err, &txErr) || txErr.Phase != txmanager.PhaseCommit || !errors.Is(err, pgx.ErrTxCommitRollback) {
		t.Fatalf("err = %#v, want a commit-phase TxError wrapping pgx.ErrTxCommitRollback", err)
	}
	if got := f.count(t, "SELECT count(*) FROM item WHERE name = 'kept'"); got != 0 {
		t.Fatalf("%d rows committed", got)
	}
}

// A callback that leaves a query's rows open leaves the connection busy. Returning so,
// COMMIT is never sent: a definite failure (nothing committed), not an outcome unknown,
// and not retried, for it would fail the same way again. Sending another statement so,
// pgx refuses it before writing ("safe to retry" to pgconn): the callback's own error,
// not retried either.
func TestRowsLeftOpenAreAFinalFailure(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		// then is what the callback does with the rows left open.
		then      func(ctx context.Context, s txmanager.Session) error
		wantPhase txmanager.Phase
		wantText  string
	}{
		{name: "returning", then: func(context.Context, txmanager.Session) error { return nil },
			wantPhase: txmanager.PhaseCommit, wantText: "rows still open"},
		{name: "sending another statement", then: func(ctx context.Context, s txmanager.Session) error {
			_, err := s.DB().Exec(ctx, "SELECT 1")
			return err
		}, wantText: "conn busy"},
		{name: "sending another statement, its error joined with another", then: func(ctx context.Context, s txmanager.Session) error {
			_, err := s.DB().Exec(ctx, "SELECT 1")
			return errors.Join(errors.New("saving the item"), err)
		}, wantText: "conn busy"},
	}
	f := newFixture(t, txmanager.Config{})
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("left-open-%d", i)
			runs := 0
			err := f.manager.WithinTx(context.Background(), txmanager.DefaultOptions().WithTraceName(name).WithRetries(3), func(ctx context.Context, s txmanager.Session) error {
				runs++
				if err := insertItem(name)(ctx, s); err != nil {
					return err
				}
				if _, err := s.DB().Query(ctx, "SELECT generate_series(1, 10000)"); err != nil { // never read nor closed
					return err
				}
				return tc.then(ctx, s)
			})
			if err == nil || !strings.Contains(err.Error(), tc.wantText) {
				t.Fatalf("err = %v, want one saying %q", err, tc.wantText)
			}
			if errors.Is(err, txmanager.ErrCommitOutcomeUnknown) || errors.Is(err, txmanager.ErrRetryableTx) {
				t.Fatalf("err = %v: reported as an unknown outcome or retryable", err)
			}
			var txErr *txmanager.TxError
			if tc.wantPhase != "" && (!errors.As(err, &txErr) || txErr.Phase != tc.wantPhase || txErr.Kind != txmanager.KindOther) {
				t.Fatalf("err = %v, want a %s-phase TxError of kind other", err, tc.wantPhase)
			}
			if runs != 1 {
				t.Fatalf("the callback ran %d times, want once", runs)
			}
			if got := f.count(t, "SELECT count(*) FROM item WHERE name = $1", name); got != 0 {
				t.Fatalf("%d rows committed", got)
			}
			// A COMMIT never sent is the transaction's failure, logged as an error; the
			// callback's own error is the caller's to report.
			loggedAsError := false
			for _, line := range strings.Split(f.logs.String(), "\n") {
				if strings.HasPrefix(line, "ERROR") && strings.Contains(line, "tx_name="+name+" ") {
					loggedAsError = true
				}
			}
			if loggedAsError != (tc.wantPhase == txmanager.PhaseCommit) {
				t.Fatalf("logged as an error: %v, want %v; logs:\n%s", loggedAsError, tc.wantPhase == txmanager.PhaseCommit, f.logs.String())
			}
		})
	}
}

// On one connection (*pgx.Conn), a session the server ended is a final failure: a retry on
// the closed connection would fail at once, every time, and "retryable" would tell the
// caller to try again on it. The callback runs once.
func TestAClosedSingleConnectionIsNotRetried(t *testing.T) {
	t.Parallel()
	f := newFixture(t, txmanager.Config{})
	_, manager := singleConnManager(t, f)
	runs := 0
	err := manager.WithinTx(context.Background(), txmanager.DefaultOptions().WithRetries(3), func(ctx context.Context, s txmanager.Session) error {
		runs++
		_, err := s.DB().Exec(ctx, "SELECT pg_terminate_backend(pg_backend_pid())")
		return err
	})
	if err == nil || txmanager.IsRetryable(err) || runs != 1 || !strings.Contains(err.Error(), "connection is closed") {
		t.Fatalf("err = %v (retryable %v) after %d runs; want a final failure saying the connection is closed, after one run", err, txmanager.IsRetryable(err), runs)
	}
}

// A connection lost before COMMIT was sent (a network failure, a pooler or proxy restarted,
// a failover that reset it) committed nothing: the server rolls back a session it lost. The
// attempt is retryable and runs again on a fresh connection, whether the loss met the
// connecting, the first statement (sent with BEGIN) or a later one. Before, such a failure carried no SQLSTATE, and
// pgconn calls an error after bytes were written unsafe to retry: the caller got it after one
// attempt.
func TestAConnectionLostBeforeCommitIsRetried(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// lostAt is the statement of the first attempt whose reply is lost (0: the first).
		lostAt int
		// beginAlone: the first statement is one BEGIN goes ahead of in a round trip of its
		// own (an Exec without arguments), so the reply lost is BEGIN's.
		beginAlone bool
	}{
		{"connecting, for the first statement", -1, false},
		{"the first statement, sent with BEGIN", 0, false},
		{"BEGIN, sent alone", 0, true},
		{"a later statement", 1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, txmanager.Config{})
			manager, proxy, pool := f.behindReplyDroppingProxy(t)
			if tc.lostAt >= 0 {
				// The pool's connection is made before: the reply lost is a statement's.
				if err := pool.Ping(context.Background()); err != nil {
					t.Fatal(err)
				}
			} else {
				proxy.dropNextReply()
			}
			name := "lost-" + strconv.Itoa(tc.lostAt) + strconv.FormatBool(tc.beginAlone)
			attempts := 0
			err := manager.WithinTx(context.Background(), txmanager.DefaultOptions().WithRetries(3), func(ctx context.Context, s txmanager.Session) error {
				attempts++
				if tc.beginAlone {
					if attempts == 1 {
						proxy.dropNextReply()
					}
					if _, err := s.DB().Exec(ctx, "SET LOCAL application_name = 'lost'"); err != nil {
						return err
					}
				}
				for i, sql := range []string{"INSERT INTO item (name) VALUES ($1)", "UPDATE item SET name = $1 WHERE name = $1"} {
					if attempts == 1 && i == tc.lostAt && !tc.beginAlone {
						proxy.dropNextReply()
					}
					if _, err := s.DB().Exec(ctx, sql, name); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil || attempts != 2 {
				t.Fatalf("err = %v after %d attempts; want success on the second", err, attempts)
			}
			if got := f.count(t, "SELECT count(*) FROM item WHERE name = $1", name); got != 1 {
				t.Fatalf("rows = %d, want exactly 1 (the first attempt committed nothing)", got)
			}
		})
	}
}

// A failure the database gave is the transaction's, logged as an error whatever its kind;
// an error the callback made itself, returned as it was, is the caller's to report and is
// logged at debug only.
func TestFailuresAreLoggedAsWhoseTheyAre(t *testing.T) {
	t.Parallel()
	f := newFixture(t, txmanager.Config{})
	cases := []struct {
		name      string
		fn        func(ctx context.Context, s txmanager.Session) error
		wantError bool
	}{
		{"a statement the server refused", func(ctx context.Context, s txmanager.Session) error {
			_, err := s.DB().Exec(ctx, "SELECT * FROM missing_table")
			return err
		}, true},
		{"a statement the server refused, wrapped by the callback", func(ctx context.Context, s txmanager.Session) error {
			_, err := s.DB().Exec(ctx, "SELECT 1/0")
			return fmt.Errorf("computing the share: %w", err)
		}, true},
		{"the callback's own error", func(ctx context.Context, s txmanager.Session) error {
			if err := insertItem("own-error")(ctx, s); err != nil {
				return err
			}
			return errors.New("the order is not payable")
		}, false},
	}
	for i, tc := range cases {
		name := fmt.Sprintf("logged-%d", i)
		if err := f.manager.WithinTx(context.Background(), txmanager.DefaultOptions().WithTraceName(name), tc.fn); err == nil {
			t.Fatalf("%s: no error", tc.name)
		}
		level := ""
		for _, line := range strings.Split(f.logs.String(), "\n") {
			if strings.Contains(line, "tx_name="+name+" ") && strings.Contains(line, "transaction failed") {
				level, _, _ = strings.Cut(line, " ")
			}
		}
		if (level == "ERROR") != tc.wantError || level == "" {
			t.Errorf("%s: logged at %q, want error level %v; logs:\n%s", tc.name, level, tc.wantError, f.logs.String())
		}
	}
}

// A connection that closed under the callback (a statement of its own under a shorter
// deadline, whose error it did not return) cannot carry COMMIT: nothing was committed, and
// WithinTx says so rather than reporting an unknown outcome.
func TestACommitNeverSentIsNotAnUnknownOutcome(t *testing.T) {
	t.Parallel()
	f := newFixture(t, txmanager.Config{})
	err := f.manager.WithinTx(context.Background(), txmanager.DefaultOptions(), func(ctx context.Context, s txmanager.Session) error {
		if err := insertItem("never-committed")(ctx, s); err != nil {
			return err
		}
		short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		_, _ = s.DB().Exec(short, "SELECT pg_sleep(2)") // its error dropped: a bug of the caller's
		return nil
	})
	var txErr *txmanager.TxError
	if errors.Is(err, txmanager.ErrCommitOutcomeUnknown) || !errors.As(err, &txErr) || txErr.Kind != txmanager.KindOther || txErr.Phase != txmanager.PhaseCommit {
		t.Fatalf("err = %v, want a commit-phase failure of kind other, not an unknown outcome", err)
	}
	if got := f.count(t, "SELECT count(*) FROM item WHERE name = 'never-committed'"); got != 0 {
		t.Fatalf("%d rows committed", got)
	}
}

// A context kept past its transaction (context.WithoutCancel, for work after the commit
// such as publishing an event) no longer carries the transaction: a WithinTx on it begins
// a transaction of its own rather than being refused as nested for good.
func TestAContextKeptPastItsTransactionBeginsAnother(t *testing.T) {
	t.Parallel()
	f := newFixture(t, txmanager.Config{})
	var kept context.Context
	err := f.manager.WithinTx(context.Background(), txmanager.DefaultOptions(), func(ctx context.Context, s txmanager.Session) error {
		kept = context.WithoutCancel(ctx)
		if !txmanager.InTx(kept) {
			return errors.New("a context derived inside the transaction does not carry it")
		}
		return insertItem("before")(ctx, s)
	})
	if err != nil {
		t.Fatal(err)
	}
	if txmanager.InTx(kept) {
		t.Fatal("InTx on a context kept past its transaction: true, want false")
	}
	if err := f.manager.WithinTx(kept, txmanager.DefaultOptions(), insertItem("after")); err != nil {
		t.Fatalf("a transaction on a context kept past the first: %v, want it run", err)
	}
	if got := f.count(t, "SELECT count(*) FROM item WHERE name IN ('before', 'after')"); got != 2 {
		t.Fatalf("%d rows, want 2", got)
	}
}
