package txmanager

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Sentinel errors. Every error returned by WithinTx that comes from the database or from the
// transaction's deadline is a *TxError, which matches one of these with errors.Is and still
// unwraps to the original error (errors.As(err, &pgErr) works).
var (
	// ErrRetryableTx marks a failure the whole transaction may safely be re-run after:
	// serialization failure (40001), deadlock (40P01), lock not available (55P03), the
	// server ending the session before COMMIT (connection exceptions, class 08; shutdown,
	// 57P01-57P03: a failover or a terminated backend; nothing was committed, and the retry
	// runs on a fresh connection), or an error pgconn reports as raised before anything
	// reached the server.
	ErrRetryableTx = errors.New("txmanager: retryable transaction failure")
	// ErrConflict marks a constraint conflict: unique (23505) or foreign key (23503) violation.
	ErrConflict = errors.New("txmanager: constraint conflict")
	// ErrCommitOutcomeUnknown means the connection failed, or the server ended the session,
	// while COMMIT was in flight: the transaction may or may not have committed. It is never
	// retried automatically.
	ErrCommitOutcomeUnknown = errors.New("txmanager: commit outcome unknown")
	// ErrTxTimeout means the transaction's deadline (TxOptions.Timeout or the caller's
	// context) expired; the error also matches context.DeadlineExceeded.
	ErrTxTimeout = errors.New("txmanager: transaction timed out")
	// ErrNestedTx is returned when WithinTx is called with a context that already carries a
	// transaction of this package on the same database (pool or connection). Nesting is
	// refused rather than joined: a joined inner call could not honour its own options
	// (isolation, read-only, timeout, retries). A manager on another database runs its own.
	ErrNestedTx = errors.New("txmanager: nested transaction refused: context already carries a transaction")
)

// SQLSTATE codes this package classifies.
const (
	sqlStateSerializationFailure = "40001"
	sqlStateDeadlockDetected     = "40P01"
	sqlStateLockNotAvailable     = "55P03"
	sqlStateUniqueViolation      = "23505"
	sqlStateForeignKeyViolation  = "23503"
	sqlStateReadOnlyTransaction  = "25006"
	sqlStateAdminShutdown        = "57P01"
	sqlStateCrashShutdown        = "57P02"
	sqlStateCannotConnectNow     = "57P03"
	// sqlClassConnectionException prefixes every SQLSTATE of class 08.
	sqlClassConnectionException = "08"
)

// sessionEnded: the server ended (or refused) the session itself: a failover, a restart, a
// terminated backend. Nothing of an uncommitted transaction survives it.
func sessionEnded(state string) bool {
	switch state {
	case sqlStateAdminShutdown, sqlStateCrashShutdown, sqlStateCannotConnectNow:
		return true
	}
	return strings.HasPrefix(state, sqlClassConnectionException)
}

// ErrorKind is the class a failed transaction falls into; it is also the `error.kind`
// attribute on metrics and spans.
type ErrorKind string

const (
	KindRetryable     ErrorKind = "retryable"
	KindConflict      ErrorKind = "conflict"
	KindCommitUnknown ErrorKind = "commit_unknown"
	KindTimeout       ErrorKind = "timeout"
	KindCanceled      ErrorKind = "canceled"
	KindOther         ErrorKind = "other"
)

// Phase says where in the transaction the error arose.
type Phase string

const (
	PhaseBegin    Phase = "begin"
	PhaseCallback Phase = "callback"
	PhaseCommit   Phase = "commit"
)

// TxError is the error WithinTx returns for failures it classified.
type TxError struct {
	Kind     ErrorKind
	Phase    Phase
	SQLState string // empty when the failure did not come from the server
	Err      error  // the original error
}

func (e *TxError) Error() string {
	if e.SQLState != "" {
		return fmt.Sprintf("txmanager: %s failed (%s, SQLSTATE %s): %v", e.Phase, e.Kind, e.SQLState, e.Err)
	}
	return fmt.Sprintf("txmanager: %s failed (%s): %v", e.Phase, e.Kind, e.Err)
}

// Unwrap exposes both the class sentinel and the original error to errors.Is / errors.As.
func (e *TxError) Unwrap() []error {
	if sentinel := e.Kind.sentinel(); sentinel != nil {
		return []error{sentinel, e.Err}
	}
	return []error{e.Err}
}

func (k ErrorKind) sentinel() error {
	switch k {
	case KindRetryable:
		return ErrRetryableTx
	case KindConflict:
		return ErrConflict
	case KindCommitUnknown:
		return ErrCommitOutcomeUnknown
	case KindTimeout:
		return ErrTxTimeout
	default:
		return nil
	}
}

// SQLState returns the SQLSTATE carried anywhere in err's chain, or "".
func SQLState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// IsRetryable reports whether err belongs to the retryable class.
func IsRetryable(err error) bool { return errors.Is(err, ErrRetryableTx) }

// classify turns err, raised in phase while ctx was the transaction's context, into a
// *TxError. Errors that are already *TxError (a callback returning one from elsewhere) are
// kept as they are. Application errors returned by the callback that carry no SQLSTATE and
// are not context errors are returned unchanged, so callers see exactly what they returned.
func classify(ctx context.Context, phase Phase, err error) error {
	if err == nil {
		return nil
	}
	var already *TxError
	if errors.As(err, &already) {
		return err
	}
	state := SQLState(err)
	kind := kindOf(ctx, phase, state, err)
	if kind == KindOther && state == "" && phase == PhaseCallback {
		return err
	}
	if (kind == KindTimeout || kind == KindCanceled || kind == KindCommitUnknown) && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		// pgx may surface a cancelled query as SQLSTATE 57014 or a closed connection; join the
		// context's error so errors.Is(err, context.DeadlineExceeded) holds either way.
		err = errors.Join(err, ctx.Err())
	}
	return &TxError{Kind: kind, Phase: phase, SQLState: state, Err: err}
}

// connBusy: err is pgconn's refusal to send on a connection another statement still holds
// (its rows not read to the end or closed). pgconn refuses before writing a byte; its error
// type is unexported, and its text is this.
func connBusy(err error) bool {
	busy := false
	walkChain(err, func(e error) bool {
		//nolint:errorlint // walkChain hands each error of the chain in turn
		if safe, ok := e.(interface{ SafeToRetry() bool }); ok && e.Error() == "conn busy" {
			busy = safe.SafeToRetry()
		}
		return !busy
	})
	return busy
}

// walkChain hands visit err and, while visit answers true, the errors err wraps, depth
// first: one (fmt.Errorf with one %w) or several (a TxError, errors.Join, two %w).
func walkChain(err error, visit func(error) bool) {
	if err == nil || !visit(err) {
		return
	}
	//nolint:errorlint // each wrapped error is visited in turn
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		walkChain(u.Unwrap(), visit)
	case interface{ Unwrap() []error }:
		for _, inner := range u.Unwrap() {
			walkChain(inner, visit)
		}
	}
}

func kindOf(ctx context.Context, phase Phase, state string, err error) ErrorKind {
	switch state {
	case sqlStateSerializationFailure, sqlStateDeadlockDetected, sqlStateLockNotAvailable:
		return KindRetryable
	case sqlStateUniqueViolation, sqlStateForeignKeyViolation:
		return KindConflict
	}
	// Without an answer from the server a COMMIT may have landed, and so may one whose session
	// the server ended while it ran. pgconn's SafeToRetry is not trusted here: it reports
	// "conn closed" as safe even when COMMIT was already on the wire.
	if phase == PhaseCommit && (state == "" || sessionEnded(state)) {
		return KindCommitUnknown
	}
	// Before COMMIT, a session the server ended committed nothing: run it all again. So did
	// one that could not connect for its BEGIN (a failover, a pooler restarting).
	if sessionEnded(state) {
		return KindRetryable
	}
	var connectErr *pgconn.ConnectError
	if phase == PhaseBegin && state == "" && errors.As(err, &connectErr) && ctx.Err() == nil {
		return KindRetryable
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		return KindTimeout
	case errors.Is(err, context.Canceled) || errors.Is(ctx.Err(), context.Canceled):
		return KindCanceled
	}
	// A statement sent while another's rows are still open is refused before it is written
	// ("safe to retry" to pgconn), but the callback would make the same mistake again.
	if state == "" && pgconn.SafeToRetry(err) && !connBusy(err) {
		return KindRetryable
	}
	return KindOther
}
