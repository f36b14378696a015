package txmanager

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-kratos/kratos/v2/log"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"
)

// Manager draws explicit transaction boundaries in the service layer. The callback receives
// a context that marks it as inside a transaction and a Session for repositories.
type Manager interface {
	// WithinTx runs fn in a read-write transaction (unless opts says read-only) and commits
	// when fn returns nil. Any error or panic rolls back; a panic is re-raised afterwards.
	WithinTx(ctx context.Context, opts TxOptions, fn func(ctx context.Context, s Session) error) error
	// WithinReadOnlyTx is WithinTx with the access mode forced to READ ONLY: the database
	// rejects writes with SQLSTATE 25006.
	WithinReadOnlyTx(ctx context.Context, opts TxOptions, fn func(ctx context.Context, s Session) error) error
}

// DBTX is the query surface sqlc's generated `New(db DBTX)` accepts (sql_package pgx/v5).
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Session is what repositories run their queries on inside a transaction.
type Session interface {
	// DB is the transaction as a DBTX: `queries := sqlcpkg.New(sess.DB())`.
	DB() DBTX
	// Tx is the underlying pgx transaction, for what DBTX does not cover.
	Tx() pgx.Tx
	// ReadOnly reports whether the transaction was opened READ ONLY.
	ReadOnly() bool
}

// Beginner opens transactions; *pgxpool.Pool and *pgx.Conn implement it.
type Beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// InTx reports whether ctx was handed out by WithinTx / WithinReadOnlyTx (of any manager)
// to a transaction still running.
func InTx(ctx context.Context) bool {
	for mark, _ := ctx.Value(txContextKey{}).(*txMark); mark != nil; mark = mark.outer {
		if !mark.ended.Load() {
			return true
		}
	}
	return false
}

type txContextKey struct{}

// txMark is what a transaction's context carries: the database it runs on, and the mark of
// the transaction it runs inside (of another manager on another database), if any.
type txMark struct {
	db        Beginner
	traceName string
	outer     *txMark
	// innerCommitted: a transaction on another database committed inside this one, which a
	// retry of this one would run (and commit) again.
	innerCommitted atomic.Bool
	// ended: the attempt is over. A context kept past it (context.WithoutCancel, for work
	// after the commit) no longer carries a transaction: a WithinTx on it begins its own.
	ended atomic.Bool
}

// inTxOn reports the transaction ctx carries on db, if any.
func inTxOn(ctx context.Context, db Beginner) (*txMark, bool) {
	mark, _ := ctx.Value(txContextKey{}).(*txMark)
	for ; mark != nil; mark = mark.outer {
		if !mark.ended.Load() && sameBeginner(mark.db, db) {
			return mark, true
		}
	}
	return nil, false
}

// sameBeginner compares two Beginners without panicking on a type that cannot be compared
// (a Beginner of the caller's own, held by value): such ones are taken as different.
func sameBeginner(a, b Beginner) bool {
	ta, tb := reflect.TypeOf(a), reflect.TypeOf(b)
	return ta == tb && ta != nil && ta.Comparable() && a == b
}

// attemptSession is the Session of one attempt, with what runOnce needs to end it.
type attemptSession interface {
	Session
	// beginError is why the transaction could not begin, once a statement tried; nil otherwise.
	beginError() error
	// connClosed: the connection the transaction ran on is closed (pgx closes it on any
	// failure to read or write it). False when none was taken.
	connClosed() bool
	// txHandedOut: the callback had pgx's transaction (Tx()), and may have committed it.
	txHandedOut() bool
	// begun: a transaction began on the server (a statement ran, or Tx() was asked for).
	begun() bool
	commit(ctx context.Context) error
	rollback(ctx context.Context) error
}

// session is a transaction begun in a round trip of its own before the callback runs: what
// a Beginner other than a pool gets, and every pool with Config.SeparateBegin.
type session struct {
	tx       pgx.Tx
	readOnly bool
	// handedOut: Tx() gave pgx's transaction to the callback, which may have ended it.
	handedOut atomic.Bool
}

func (s *session) DB() DBTX { return s.tx }
func (s *session) Tx() pgx.Tx {
	s.handedOut.Store(true)
	return s.tx
}
func (s *session) ReadOnly() bool    { return s.readOnly }
func (s *session) beginError() error { return nil }
func (s *session) txHandedOut() bool { return s.handedOut.Load() }
func (s *session) begun() bool       { return true }
func (s *session) connClosed() bool {
	conn := s.tx.Conn()
	return conn != nil && conn.IsClosed()
}
func (s *session) commit(ctx context.Context) error   { return s.tx.Commit(ctx) }
func (s *session) rollback(ctx context.Context) error { return s.tx.Rollback(ctx) }

type manager struct {
	db Beginner
	// pool is db when it is a pool and BEGIN may share its first statement's round trip.
	pool *pgxpool.Pool
	// prepared records the first statements each of pool's connections has cached.
	prepared *preparedStatements
	// begins caches the begin statements per combination of options (beginFor).
	begins sync.Map
	cfg    resolvedConfig
	tel    *telemetry
	log    *log.Helper
}

// rollbackTimeout bounds the rollback that runs on a context detached from the caller's, so a
// cancelled caller still releases the connection cleanly.
const rollbackTimeout = 5 * time.Second

func (m *manager) WithinTx(ctx context.Context, opts TxOptions, fn func(context.Context, Session) error) error {
	return m.within(ctx, m.resolve(opts, false), fn)
}

func (m *manager) WithinReadOnlyTx(ctx context.Context, opts TxOptions, fn func(context.Context, Session) error) error {
	return m.within(ctx, m.resolve(opts, true), fn)
}

func (m *manager) within(ctx context.Context, r resolved, fn func(context.Context, Session) error) error {
	// Nesting on one database is refused: the inner call would take a second connection
	// while the outer holds one, and could not keep its own options inside the outer's
	// transaction. A transaction on another database (another manager's) inside it is two
	// transactions, as the caller means.
	if outer, nested := inTxOn(ctx, m.db); nested {
		return fmt.Errorf("%w (trace name %q, inside %q)", ErrNestedTx, r.traceName, outer.traceName)
	}
	if err := r.checkSettings(); err != nil {
		return err
	}
	started := time.Now()
	ctx, span := m.tel.startSpan(ctx, r)
	attempt := 0
	// A panic in fn propagates through runOnce (which has rolled back); record it here so
	// the span and metrics still close, then let it continue up the stack.
	defer func() {
		if p := recover(); p != nil {
			m.tel.finish(ctx, span, r, started, attempt, fmt.Errorf("panic: %v", p))
			panic(p)
		}
	}()
	for {
		attempt++
		err := m.runOnce(ctx, r, fn)
		if err == nil {
			m.tel.finish(ctx, span, r, started, attempt, nil)
			return nil
		}
		err = m.onClosedConn(err)
		delay, retry := m.nextDelay(ctx, r, attempt, err)
		if !retry {
			m.logFailure(ctx, r, attempt, started, err)
			m.tel.finish(ctx, span, r, started, attempt, err)
			return err
		}
		m.tel.retries.Add(ctx, 1, m.tel.metricAttrs(r, "", "", false))
		span.AddEvent("retry")
		m.logWith(ctx, r, err).Warnw("msg", "transaction retry", "attempt", attempt, "delay_ms", delay.Milliseconds())
		timer := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			timer.Stop()
			// A new error, not the failure joined: that one is retryable, and a caller that
			// left must not be told to try again. Its text is kept.
			err = classify(ctx, PhaseBegin, fmt.Errorf("%w while waiting to retry after: %s", ctx.Err(), err.Error()))
			m.logFailure(ctx, r, attempt, started, err)
			m.tel.finish(ctx, span, r, started, attempt, err)
			return err
		case <-timer.C:
		}
	}
}

// onClosedConn makes a retryable failure final when the manager runs on one connection
// (*pgx.Conn) and that connection is closed (the server ended the session): every retry on
// it would fail at once, and the caller must be told to open another, not to try again.
// A pool's retry takes a fresh connection, and keeps the failure retryable.
func (m *manager) onClosedConn(err error) error {
	conn, single := m.db.(*pgx.Conn)
	var txErr *TxError
	if !single || !conn.IsClosed() || !errors.As(err, &txErr) || txErr.Kind != KindRetryable {
		return err
	}
	return &TxError{Kind: KindOther, Phase: txErr.Phase, SQLState: txErr.SQLState,
		Err: fmt.Errorf("the connection is closed, so no retry can run on it (open another): %w", txErr.Err)}
}

// nextDelay decides whether a failed attempt is re-run and after how long: only retryable
// classes, within MaxRetries, and never when the wait would cross the caller's deadline.
func (m *manager) nextDelay(ctx context.Context, r resolved, attempt int, err error) (time.Duration, bool) {
	if !IsRetryable(err) || attempt > r.maxRetries || ctx.Err() != nil {
		return 0, false
	}
	delay := backoff(m.cfg.RetryBaseDelay, m.cfg.RetryMaxDelay, attempt)
	if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) <= delay {
		return 0, false
	}
	return delay, true
}

// backoff is "full jitter" exponential backoff: uniform in [base, min(max, base*2^(attempt-1))].
func backoff(base, ceiling time.Duration, attempt int) time.Duration {
	upper := base << min(attempt-1, 20)
	if upper > ceiling || upper <= 0 {
		upper = ceiling
	}
	if upper <= base {
		return base
	}
	return base + rand.N(upper-base)
}

// runOnce is one attempt: begin, fn, commit; rollback on any error or panic.
func (m *manager) runOnce(parent context.Context, r resolved, fn func(context.Context, Session) error) (err error) {
	ctx := parent
	if r.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(parent, r.timeout)
		defer cancel()
	}
	sess, err := m.open(ctx, r)
	if err != nil {
		return classify(ctx, PhaseBegin, err)
	}
	activeAttrs := m.tel.metricAttrs(r, "", "", false)
	m.tel.active.Add(ctx, 1, activeAttrs)
	defer m.tel.active.Add(context.WithoutCancel(ctx), -1, activeAttrs)

	committed := false
	defer func() {
		if committed {
			return
		}
		// Detached from ctx: the caller's cancellation must not leave the transaction open.
		rbCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		if rbErr := sess.rollback(rbCtx); rbErr != nil && !errors.Is(rbErr, pgx.ErrTxClosed) {
			// pgx closes a connection whose rollback failed, so the pool will not reuse it.
			m.logWith(ctx, r, rbErr).Warnw("msg", "transaction rollback failed")
		}
	}()

	outer, _ := ctx.Value(txContextKey{}).(*txMark)
	mark := &txMark{db: m.db, traceName: r.traceName, outer: outer}
	defer mark.ended.Store(true)
	defer func() { err = notAgainAfterInnerCommits(mark, err) }()
	defer func() {
		// A read-write transaction that began and may have committed (it did, its COMMIT's
		// outcome is unknown, or the callback had pgx's transaction) forbids running the
		// outer transactions' callbacks again; a read, or a callback that ran no statement,
		// left nothing.
		var txErr *TxError
		if r.accessMode == pgx.ReadWrite && sess.begun() &&
			(err == nil || sess.txHandedOut() || errors.As(err, &txErr) && txErr.Kind == KindCommitUnknown) {
			for o := outer; o != nil; o = o.outer {
				o.innerCommitted.Store(true)
			}
		}
	}()
	txCtx := context.WithValue(ctx, txContextKey{}, mark)
	err = fn(txCtx, sess)
	if beginErr := sess.beginError(); beginErr != nil {
		// The transaction never began (its BEGIN went with the first statement): nothing ran,
		// whatever the callback made of the error.
		if err == nil || !errors.Is(err, beginErr) {
			err = errors.Join(beginErr, err)
		}
		return lostBeforeCommit(ctx, sess, PhaseBegin, classify(ctx, PhaseBegin, err))
	}
	if err != nil {
		return lostBeforeCommit(ctx, sess, PhaseCallback, classify(ctx, PhaseCallback, err))
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		// The deadline passed, or the caller left, before COMMIT was sent: nothing is
		// committed (the deferred rollback ends it), which is a timeout, not an outcome
		// unknown.
		return classify(ctx, PhaseCallback, ctxErr)
	}
	if sess.connClosed() && !sess.txHandedOut() {
		// The connection closed under the callback, which went on without the statement's
		// error (a query under a shorter deadline of its own): COMMIT cannot be sent, and the
		// server rolls back a session it lost. A definite failure, not an unknown outcome.
		return &TxError{Kind: KindOther, Phase: PhaseCommit,
			Err: errors.New("COMMIT was not sent, nothing was committed: the transaction's connection closed while the callback ran, and the callback did not return the statement's error")}
	}
	if err := sess.commit(ctx); err != nil {
		if errors.Is(err, pgx.ErrTxCommitRollback) {
			// The server rolled back instead of committing (the transaction had already failed
			// inside fn, whose error fn swallowed): a definite failure, not an unknown outcome,
			// and not an application error either: it is a *TxError the log reports.
			committed = true
			return &TxError{Kind: KindOther, Phase: PhaseCommit, Err: fmt.Errorf("a statement of the transaction failed and the callback went on: %w", err)}
		}
		committed = true // Commit has already ended the transaction or closed the connection.
		if connBusy(err) {
			// COMMIT was never sent: the callback left a query's rows open. The connection
			// is closed (by pgx's Commit, or by the pool, which never reuses a busy one), so
			// the server rolls back: a definite outcome, nothing committed. A bug of the
			// caller's: run again, it would fail the same way.
			return &TxError{Kind: KindOther, Phase: PhaseCommit,
				Err: fmt.Errorf("COMMIT was not sent, nothing was committed: the callback returned with a query's rows still open (close them first): %w", err)}
		}
		return classify(ctx, PhaseCommit, err)
	}
	committed = true
	if ctxErr := ctx.Err(); ctxErr != nil {
		// COMMIT answered, but only after the deadline. With the server asked to cancel the
		// statement (CancelStatementsOnTimeout), a COMMIT waiting for a synchronous standby
		// ends its wait and commits on the primary alone, answering success with a warning:
		// a failover may lose it. Whether it reached the standby is not known.
		return &TxError{Kind: KindCommitUnknown, Phase: PhaseCommit,
			Err: fmt.Errorf("COMMIT answered after the deadline, and may not be on a synchronous standby: %w", ctxErr)}
	}
	return nil
}

// notAgainAfterInnerCommits makes a retryable failure final when a transaction on another
// database committed inside the attempt: running the callback again would commit that one
// again.
func notAgainAfterInnerCommits(mark *txMark, err error) error {
	var txErr *TxError
	if !mark.innerCommitted.Load() || !errors.As(err, &txErr) || txErr.Kind != KindRetryable {
		return err
	}
	return &TxError{Kind: KindOther, Phase: txErr.Phase, SQLState: txErr.SQLState,
		Err: fmt.Errorf("a transaction on another database committed inside this one, so it is not run again: %w", txErr.Err)}
}

// lostBeforeCommit makes retryable a failure without SQLSTATE, before COMMIT was sent, of a
// transaction whose connection is now closed while the caller's context is live: a
// network failure, a proxy or pooler restarted, a failover that reset the connection. The
// server rolls back what a session it lost had begun, so nothing of the attempt committed
// (pgconn's SafeToRetry says otherwise once bytes were written, which only matters for a
// COMMIT). On a single connection onClosedConn then makes it final.
func lostBeforeCommit(ctx context.Context, sess attemptSession, phase Phase, err error) error {
	if err == nil || ctx.Err() != nil || SQLState(err) != "" || sess.txHandedOut() || !sess.connClosed() {
		return err
	}
	cause := err
	var txErr *TxError
	if errors.As(err, &txErr) {
		if txErr.Kind != KindOther {
			return err
		}
		cause = txErr.Err
	}
	return &TxError{Kind: KindRetryable, Phase: phase, Err: fmt.Errorf("the connection was lost before COMMIT, so nothing committed: %w", cause)}
}

// open starts an attempt's transaction. On a pool, BEGIN waits for the first statement and
// goes with it (deferredSession); otherwise it is a round trip of its own, made here.
func (m *manager) open(ctx context.Context, r resolved) (attemptSession, error) {
	begin := m.beginFor(r)
	readOnly := r.accessMode == pgx.ReadOnly
	if m.pool != nil {
		return &deferredSession{
			pool: m.pool, prepared: m.prepared, ctx: ctx, readOnly: readOnly,
			options:  pgx.TxOptions{IsoLevel: r.isolation, AccessMode: r.accessMode},
			settings: begin.settings, beginQuery: begin.query,
		}, nil
	}
	tx, err := m.db.BeginTx(ctx, pgx.TxOptions{IsoLevel: r.isolation, AccessMode: r.accessMode, BeginQuery: begin.query})
	if err != nil {
		endHalfBegunTx(m.db)
		return nil, err
	}
	return &session{tx: tx, readOnly: readOnly}, nil
}

// endHalfBegunTx rolls back what a failed BEGIN left open on a single connection. BEGIN and
// the settings go as one multi-statement query: when a setting fails (a value the server
// refuses), BEGIN has already run, and pgx keeps a connection it got an ordinary error on,
// so a *pgx.Conn would answer every later statement with "current transaction is aborted".
// A pool's connection needs nothing: the pool destroys one released outside a transaction's
// idle state.
func endHalfBegunTx(db Beginner) {
	conn, ok := db.(*pgx.Conn)
	if !ok || conn.IsClosed() || conn.PgConn().TxStatus() == 'I' {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
	defer cancel()
	if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
		// A connection that cannot end its transaction is no use to anyone.
		_ = conn.Close(ctx)
	}
}

func (m *manager) logWith(ctx context.Context, r resolved, err error) *log.Helper {
	kind, state := outcome(err)
	kv := []any{
		"tx_name", r.traceName,
		"isolation", string(r.isolation),
		"access_mode", string(r.accessMode),
		"error_kind", string(kind),
		"sql_state", state,
		"error", withheldText(err),
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		kv = append(kv, "trace_id", sc.TraceID().String(), "span_id", sc.SpanID().String())
	}
	return log.NewHelper(log.With(m.log.Logger(), kv...))
}

func (m *manager) logFailure(ctx context.Context, r resolved, attempts int, started time.Time, err error) {
	kind, _ := outcome(err)
	helper := m.logWith(ctx, r, err)
	msg := "transaction failed"
	if kind == KindTimeout {
		msg = "transaction timed out"
	}
	// An application error the callback returned, passed back as it was (no SQLSTATE, not
	// the context's), is the caller's to report. Everything else the database or the
	// transaction said (a statement refused, a disk full, a begin refused, a failure made
	// final) is this transaction's failure.
	var txErr *TxError
	if !errors.As(err, &txErr) {
		helper.Debugw("msg", msg, "attempts", attempts, "elapsed_ms", time.Since(started).Milliseconds())
		return
	}
	helper.Errorw("msg", msg, "attempts", attempts, "elapsed_ms", time.Since(started).Milliseconds())
}
