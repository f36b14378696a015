package repositories

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/jackc/pgx/v5"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// migrationLockKey serialises migrators of all nodes through one advisory lock.
const migrationLockKey int64 = 0x74786d6772 // "txmgr"

// MigrateOptions tune a migration run.
type MigrateOptions struct {
	// ConfiguredChainID labels existing rows when a migration gives them a chain and the
	// database recorded none (0: not configured).
	ConfiguredChainID uint64
	// StepLockTimeout bounds how long a step waits for a table lock before it gives up and
	// tries again: readers that arrive meanwhile queue behind the waiting step, so this is
	// the longest a migration delays them (default 300 ms).
	StepLockTimeout time.Duration
}

// stepMarker starts a step of a migration file; "no-transaction" marks a step that must run
// outside a transaction (CREATE INDEX CONCURRENTLY). A file without markers is one step.
const stepMarker = "-- txm:step"

// migrationStep is one part of a migration file, run on its own.
type migrationStep struct {
	sql           string
	noTransaction bool
}

// splitSteps cuts a migration file at its step markers.
func splitSteps(body string) []migrationStep {
	var steps []migrationStep
	current := migrationStep{}
	var text strings.Builder
	flush := func() {
		if sql := strings.TrimSpace(text.String()); sql != "" {
			current.sql = sql
			steps = append(steps, current)
		}
		text.Reset()
	}
	for _, line := range strings.SplitAfter(body, "\n") {
		if marker, ok := strings.CutPrefix(strings.TrimSpace(line), stepMarker); ok {
			flush()
			current = migrationStep{noTransaction: strings.TrimSpace(marker) == "no-transaction"}
			continue
		}
		text.WriteString(line)
	}
	flush()
	return steps
}

// Migrate applies the *.sql files of fsys that the database has not seen, in name order.
// A file runs step by step (see stepMarker); its last transactional step commits together
// with its schema_migrations row, so a file is recorded only when all of it is done and the
// steps before are written to be run again after an interruption. It takes a session
// advisory lock, so it needs a direct connection (not a transaction-mode pooler), and it is
// safe to run from several nodes at once. It returns the names it applied.
func Migrate(ctx context.Context, dsn string, fsys fs.FS, opts ...MigrateOptions) ([]string, error) {
	var o MigrateOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.StepLockTimeout <= 0 {
		o.StepLockTimeout = 300 * time.Millisecond
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		// pgx's message may quote the DSN, password included (its own masking misses
		// "password = x"): keep it out of logs.
		return nil, errors.New("migrate: the database DSN is not a valid PostgreSQL connection string")
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("migrate: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if err := takeMigrationLock(ctx, conn); err != nil {
		return nil, fmt.Errorf("migrate: lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", migrationLockKey) //nolint:errcheck // the session ends right after

	if o.ConfiguredChainID != 0 {
		if _, err := conn.Exec(ctx, "SELECT set_config('txm.configured_chain_id', $1, false)", strconv.FormatUint(o.ConfiguredChainID, 10)); err != nil {
			return nil, fmt.Errorf("migrate: configured chain: %w", err)
		}
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return nil, fmt.Errorf("migrate: bookkeeping table: %w", err)
	}
	applied := map[string]bool{}
	rows, err := conn.Query(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return nil, fmt.Errorf("migrate: read applied: %w", err)
	}
	versions, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("migrate: read applied: %w", err)
	}
	for _, v := range versions {
		applied[v] = true
	}

	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	var done []string
	for _, name := range names {
		version := strings.TrimSuffix(name, ".sql")
		if applied[version] {
			continue
		}
		body, err := fs.ReadFile(fsys, name)
		if err != nil {
			return done, err
		}
		steps := splitSteps(string(body))
		if err := applyFile(ctx, conn, version, steps, len(steps) > 1, o.StepLockTimeout); err != nil {
			return done, fmt.Errorf("migrate: %s: %w", name, err)
		}
		done = append(done, version)
	}
	if err := syncSubStateCheck(ctx, conn, o.StepLockTimeout); err != nil {
		return done, fmt.Errorf("migrate: sub-state check: %w", err)
	}
	return done, nil
}

// subStateCheck keeps managed_tx.sub_state to the sub-states the code writes.
const subStateCheck = "managed_tx_sub_state_check"

// quotedValue is a value in a CHECK's definition.
var quotedValue = regexp.MustCompile(`'([A-Z_]+)'`)

// syncSubStateCheck makes the database accept exactly the sub-states domain.StoredSubStates
// lists, and those an earlier check allowed: it only widens, so a node of an earlier
// version starting during a rolling upgrade never takes back a sub-state a newer one writes.
// The constraint is added NOT VALID and validated after, which reads the table without
// blocking writes; its one brief exclusive lock is bounded like any online step.
func syncSubStateCheck(ctx context.Context, conn *pgx.Conn, lockTimeout time.Duration) error {
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass('managed_tx') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		return err // a set of migrations without the transactions' table has nothing to keep
	}
	var def string
	err := conn.QueryRow(ctx, `SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = $1 AND conrelid = 'managed_tx'::regclass`, subStateCheck).Scan(&def)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	allowed := map[string]bool{}
	for _, m := range quotedValue.FindAllStringSubmatch(def, -1) {
		allowed[m[1]] = true
	}
	before := len(allowed)
	for _, s := range domain.StoredSubStates() {
		allowed[string(s)] = true
	}
	if def != "" && len(allowed) == before {
		return nil
	}
	values := make([]string, 0, len(allowed))
	for v := range allowed {
		values = append(values, "'"+v+"'")
	}
	sort.Strings(values)
	stmt := fmt.Sprintf("ALTER TABLE managed_tx DROP CONSTRAINT IF EXISTS %s, ADD CONSTRAINT %s CHECK (sub_state IS NULL OR sub_state IN (%s)) NOT VALID",
		subStateCheck, subStateCheck, strings.Join(values, ", "))
	if err := runStepBounded(ctx, conn, true, lockTimeout, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, stmt)
		return err
	}); err != nil {
		return err
	}
	_, err = conn.Exec(ctx, "ALTER TABLE managed_tx VALIDATE CONSTRAINT "+subStateCheck)
	return err
}

// migrationLockPoll is how often a migrator that found the lock taken asks again.
const migrationLockPoll = 200 * time.Millisecond

// takeMigrationLock takes the migrators' advisory lock, asking again until it is free. It
// never waits inside pg_advisory_lock: a session blocked there is a transaction that the
// lock holder's CREATE INDEX CONCURRENTLY waits for, and the two would deadlock.
func takeMigrationLock(ctx context.Context, conn *pgx.Conn) error {
	for {
		var taken bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", migrationLockKey).Scan(&taken); err != nil {
			return err
		}
		if taken {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(migrationLockPoll):
		}
	}
}

// applyFile runs a file's steps and records it with the last transactional one (or alone
// after them when the last step cannot run in a transaction).
func applyFile(ctx context.Context, conn *pgx.Conn, version string, steps []migrationStep, boundLocks bool, lockTimeout time.Duration) error {
	record := func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version) VALUES ($1)", version)
		return err
	}
	last := len(steps) - 1
	for i, step := range steps {
		if step.noTransaction {
			if _, err := conn.Exec(ctx, step.sql); err != nil {
				return fmt.Errorf("step %d: %w", i+1, err)
			}
			if i == last {
				return pgx.BeginFunc(ctx, conn, record)
			}
			continue
		}
		err := runStepBounded(ctx, conn, boundLocks, lockTimeout, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, step.sql); err != nil {
				return err
			}
			if i == last {
				return record(tx)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("step %d: %w", i+1, err)
		}
	}
	if len(steps) == 0 {
		return pgx.BeginFunc(ctx, conn, record)
	}
	return nil
}

// sqlStateLockNotAvailable is PostgreSQL's answer when lock_timeout ran out.
const sqlStateLockNotAvailable = "55P03"

// stepLockAttempts is how often a step that could not get its locks in time is tried: with
// the default lock timeout, about a minute and a half of waiting for a long transaction.
const stepLockAttempts = 200

// runStepBounded runs one transactional step. A step of a multi-step (online) migration
// waits at most lockTimeout for each lock: a step queued behind a long transaction would
// hold every reader that arrives after it, so it steps aside and tries again instead.
func runStepBounded(ctx context.Context, conn *pgx.Conn, bounded bool, lockTimeout time.Duration, step func(pgx.Tx) error) error {
	if !bounded {
		return pgx.BeginFunc(ctx, conn, step)
	}
	var err error
	for attempt := 0; attempt < stepLockAttempts; attempt++ {
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", lockTimeout.Milliseconds())); err != nil {
				return err
			}
			return step(tx)
		})
		if txmanager.SQLState(err) != sqlStateLockNotAvailable {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(lockTimeout / 2):
		}
	}
	return fmt.Errorf("no lock within %s in %d attempts: %w", lockTimeout, stepLockAttempts, err)
}
