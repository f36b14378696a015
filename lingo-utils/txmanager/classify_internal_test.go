package txmanager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	live := context.Background()
	expired, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	cancelled, cancelNow := context.WithCancel(context.Background())
	cancelNow()
	errApp := errors.New("domain rule broken")

	tests := []struct {
		name      string
		ctx       context.Context
		phase     Phase
		err       error
		wantKind  ErrorKind // "" = returned unchanged
		wantIs    []error
		wantState string
	}{
		{name: "serialization failure", ctx: live, phase: PhaseCallback, err: &pgconn.PgError{Code: "40001"}, wantKind: KindRetryable, wantIs: []error{ErrRetryableTx}, wantState: "40001"},
		{name: "deadlock wrapped by caller", ctx: live, phase: PhaseCallback, err: fmt.Errorf("repo: %w", &pgconn.PgError{Code: "40P01"}), wantKind: KindRetryable, wantIs: []error{ErrRetryableTx}, wantState: "40P01"},
		{name: "lock not available", ctx: live, phase: PhaseCallback, err: &pgconn.PgError{Code: "55P03"}, wantKind: KindRetryable, wantState: "55P03"},
		{name: "serialization failure at commit", ctx: live, phase: PhaseCommit, err: &pgconn.PgError{Code: "40001"}, wantKind: KindRetryable, wantState: "40001"},
		{name: "unique violation", ctx: live, phase: PhaseCallback, err: &pgconn.PgError{Code: "23505"}, wantKind: KindConflict, wantIs: []error{ErrConflict}, wantState: "23505"},
		{name: "foreign key violation", ctx: live, phase: PhaseCallback, err: &pgconn.PgError{Code: "23503"}, wantKind: KindConflict, wantState: "23503"},
		{name: "read only", ctx: live, phase: PhaseCallback, err: &pgconn.PgError{Code: "25006"}, wantKind: KindOther, wantState: "25006"},
		{name: "connection lost at commit", ctx: live, phase: PhaseCommit, err: io.ErrUnexpectedEOF, wantKind: KindCommitUnknown, wantIs: []error{ErrCommitOutcomeUnknown, io.ErrUnexpectedEOF}},
		{name: "deadline during callback", ctx: expired, phase: PhaseCallback, err: errors.New("conn closed"), wantKind: KindTimeout, wantIs: []error{ErrTxTimeout, context.DeadlineExceeded}},
		{name: "deadline at begin", ctx: expired, phase: PhaseBegin, err: context.DeadlineExceeded, wantKind: KindTimeout, wantIs: []error{context.DeadlineExceeded}},
		{name: "cancelled", ctx: cancelled, phase: PhaseCallback, err: context.Canceled, wantKind: KindCanceled, wantIs: []error{context.Canceled}},
		{name: "application error untouched", ctx: live, phase: PhaseCallback, err: errApp, wantIs: []error{errApp}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := classify(tc.ctx, tc.phase, tc.err)
			var txErr *TxError
			isTx := errors.As(got, &txErr)
			if tc.wantKind == "" {
				if isTx || got != tc.err { //nolint:errorlint // the very same error value must come back, unwrapped
					t.Fatalf("classify changed an application error: %v", got)
				}
			} else if !isTx || txErr.Kind != tc.wantKind {
				t.Fatalf("classify = %v, want kind %s", got, tc.wantKind)
			}
			for _, target := range append(tc.wantIs, tc.err) {
				if !errors.Is(got, target) {
					t.Errorf("errors.Is(%v, %v) = false", got, target)
				}
			}
			if SQLState(got) != tc.wantState {
				t.Errorf("SQLState = %q, want %q", SQLState(got), tc.wantState)
			}
		})
	}
}

func TestBackoffStaysWithinBounds(t *testing.T) {
	t.Parallel()
	base, ceiling := 10*time.Millisecond, 200*time.Millisecond
	for attempt := 1; attempt <= 40; attempt++ {
		upper := min(base<<min(attempt-1, 20), ceiling)
		for range 50 {
			d := backoff(base, ceiling, attempt)
			if d < base || d > upper {
				t.Fatalf("attempt %d: backoff %s outside [%s, %s]", attempt, d, base, upper)
			}
		}
	}
}

func TestBeginStatements(t *testing.T) {
	t.Parallel()
	tests := []struct {
		r            resolved
		want         string
		wantSettings []string
	}{
		{resolved{isolation: pgx.ReadCommitted, accessMode: pgx.ReadWrite, lockTimeout: time.Second}, "BEGIN ISOLATION LEVEL READ COMMITTED READ WRITE; SET LOCAL lock_timeout = 1000", []string{"SET LOCAL lock_timeout = 1000"}},
		{resolved{isolation: pgx.Serializable, accessMode: pgx.ReadOnly, lockTimeout: -1}, "BEGIN ISOLATION LEVEL SERIALIZABLE READ ONLY", nil},
		{resolved{isolation: pgx.RepeatableRead, accessMode: pgx.ReadWrite, lockTimeout: time.Microsecond}, "BEGIN ISOLATION LEVEL REPEATABLE READ READ WRITE; SET LOCAL lock_timeout = 1", []string{"SET LOCAL lock_timeout = 1"}},
		{resolved{isolation: pgx.ReadCommitted, accessMode: pgx.ReadWrite, lockTimeout: -1, idleTimeout: 3 * time.Second}, "BEGIN ISOLATION LEVEL READ COMMITTED READ WRITE; SET LOCAL idle_in_transaction_session_timeout = 3000", []string{"SET LOCAL idle_in_transaction_session_timeout = 3000"}},
		{resolved{isolation: pgx.ReadCommitted, accessMode: pgx.ReadOnly, lockTimeout: 2 * time.Second, idleTimeout: time.Second}, "BEGIN ISOLATION LEVEL READ COMMITTED READ ONLY; SET LOCAL lock_timeout = 2000; SET LOCAL idle_in_transaction_session_timeout = 1000", []string{"SET LOCAL lock_timeout = 2000", "SET LOCAL idle_in_transaction_session_timeout = 1000"}},
		{resolved{isolation: pgx.ReadCommitted, accessMode: pgx.ReadWrite, lockTimeout: -1, settings: []Setting{{"plan_cache_mode", "force_generic_plan"}, {"application_name", "o'brien"}}}, "BEGIN ISOLATION LEVEL READ COMMITTED READ WRITE; SET LOCAL plan_cache_mode = 'force_generic_plan'; SET LOCAL application_name = 'o''brien'", []string{"SET LOCAL plan_cache_mode = 'force_generic_plan'", "SET LOCAL application_name = 'o''brien'"}},
	}
	for _, tc := range tests {
		got := tc.r.beginStatements()
		if got.query != tc.want {
			t.Errorf("query = %q, want %q", got.query, tc.want)
		}
		if !slices.Equal(got.settings, tc.wantSettings) {
			t.Errorf("settings = %q, want %q", got.settings, tc.wantSettings)
		}
	}
}

func TestParseIsolation(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]pgx.TxIsoLevel{
		"": pgx.ReadCommitted, "read_committed": pgx.ReadCommitted, "REPEATABLE READ": pgx.RepeatableRead,
		"serializable": pgx.Serializable, "repeatable-read": pgx.RepeatableRead,
	} {
		got, err := ParseIsolation(in)
		if err != nil || got != want {
			t.Errorf("ParseIsolation(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := ParseIsolation("chaos"); err == nil || !strings.Contains(err.Error(), "chaos") {
		t.Errorf("ParseIsolation(chaos) err = %v", err)
	}
}

func TestSettingNames(t *testing.T) {
	t.Parallel()
	for name, ok := range map[string]bool{
		"plan_cache_mode": true, "work_mem": true, "myapp.tenant_id": true, "x1": true,
		"": false, "1x": false, "a b": false, "a;DROP TABLE t": false, "a'": false, ".a": false, "a-b": false,
	} {
		if got := isParameterName(name); got != ok {
			t.Errorf("isParameterName(%q) = %v, want %v", name, got, ok)
		}
	}
}
