package repositories_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"
	migrations "github.com/bionicotaku/txmanager-migrations"

	"github.com/bionicotaku/txmanager-service/internal/repositories"
)

// chainIDMigration is the migration that gives every key a chain.
const chainIDMigration = "0010_chain_id"

// migrationsBefore is the service's migrations up to (not including) version: a database
// as the previous release left it.
func migrationsBefore(t *testing.T, version string) fs.FS {
	t.Helper()
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	before := fstest.MapFS{}
	for _, name := range names {
		if strings.TrimSuffix(name, ".sql") >= version {
			continue
		}
		body, err := fs.ReadFile(migrations.FS, name)
		if err != nil {
			t.Fatal(err)
		}
		before[name] = &fstest.MapFile{Data: body}
	}
	return before
}

// singleChainDatabase is a database at the release before chainIDMigration holding rows in
// every table the migration changes: signers signer-0..19 (leases, cursors, a quarantine),
// txs transactions spread over them (nonce = index / 20), every one with an attempt, and a
// completion per confirmed one up to 50,000. With txs 0 it is empty.
func singleChainDatabase(t *testing.T, txs int, recordedChain int64) string {
	t.Helper()
	ctx := context.Background()
	dsn := pgtest.NewDatabase(t)
	if _, err := repositories.Migrate(ctx, dsn, migrationsBefore(t, chainIDMigration)); err != nil {
		t.Fatalf("migrate to the previous release: %v", err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	seed := []string{
		`INSERT INTO signer_lease (signer, owner_node, fencing_token, acquired_at, expires_at)
		 SELECT 'signer-' || i, 'node-a', 1, now(), now() + interval '1 minute' FROM generate_series(0, 19) i WHERE $1::int > 0`,
		`INSERT INTO signer_nonce_cursor (signer, next_nonce, fencing_token)
		 SELECT 'signer-' || i, $1::bigint / 20 + 1, 1 FROM generate_series(0, 19) i WHERE $1::int > 0`,
		`INSERT INTO managed_tx (tx_id, signer, request_id, intent_hash, nonce, payload, state, fencing_token, tx_hash)
		 SELECT gen_random_uuid(), 'signer-' || (i % 20), 'req-' || i, '\x00', i / 20, '{"value":"0"}',
		        CASE WHEN i % 10 = 0 THEN 'TRACKING' ELSE 'CONFIRMED' END, 1, '0x' || md5(i::text)
		 FROM generate_series(0, $1::int - 1) i`,
		`INSERT INTO tx_attempt (tx_hash, tx_id, signer, nonce, kind, max_fee_per_gas, max_priority_fee_per_gas, gas_limit, raw_tx, fencing_token)
		 SELECT tx_hash, tx_id, signer, nonce, 'ORIGINAL', 1, 1, 21000, '\x00', 1 FROM managed_tx WHERE $1::int > 0`,
		`INSERT INTO tx_completions (tx_id, signer, status)
		 SELECT tx_id, signer, state FROM managed_tx WHERE state = 'CONFIRMED' AND $1::int > 0 LIMIT 50000`,
		`INSERT INTO signer_quarantine (signer, db_next_nonce, chain_nonce, detected_by, fencing_token)
		 SELECT 'signer-0', 1, 2, 'node-a', 1 WHERE $1::int > 0`,
	}
	for _, sql := range seed {
		if _, err := conn.Exec(ctx, sql, txs); err != nil {
			t.Fatalf("seed the previous release's rows: %v\n%s", err, sql)
		}
	}
	if recordedChain != 0 {
		if _, err := conn.Exec(ctx, "INSERT INTO chain_identity (chain_id, genesis_hash) VALUES ($1, '0xgenesis')", recordedChain); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Exec(ctx, "ANALYZE"); err != nil {
		t.Fatal(err)
	}
	return dsn
}

// chainKeyedTables are the tables the migration gives a chain_id.
var chainKeyedTables = []string{
	"signer_lease", "signer_nonce_cursor", "signer_quarantine", "managed_tx", "tx_attempt", "tx_completions", "stuck_resolution_audit",
}

// rowsNotOnChain counts, over every chain-keyed table, the rows whose chain is not chainID.
func rowsNotOnChain(ctx context.Context, t *testing.T, conn *pgx.Conn, chainID int64) int {
	t.Helper()
	total := 0
	for _, table := range chainKeyedTables {
		var n int
		if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM %s WHERE chain_id IS DISTINCT FROM $1", table), chainID).Scan(&n); err != nil {
			t.Fatalf("%s: %v", table, err)
		}
		total += n
	}
	return total
}

// readerStats is what the readers saw while the migration ran.
type readerStats struct {
	reads, readsDuringMigration atomic.Int64
	mu                          sync.Mutex
	errs                        []error
	slowest                     time.Duration
}

func (s *readerStats) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.errs) < 10 {
		s.errs = append(s.errs, err)
	}
}

func (s *readerStats) took(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slowest = max(s.slowest, d)
}

// readContinuously runs the reads the previous release's nodes make (by signer and nonce,
// by request id, the lease, the cursor, a page of the feed) until ctx ends; migrating says
// whether a migration is running at the moment.
func readContinuously(ctx context.Context, pool *pgxpool.Pool, seed uint64, txs int, migrating *atomic.Bool, stats *readerStats) {
	r := rand.New(rand.NewPCG(seed, seed))
	for ctx.Err() == nil {
		i := r.IntN(txs)
		signer := fmt.Sprintf("signer-%d", i%20)
		var sql string
		var args []any
		switch r.IntN(5) {
		case 0:
			sql, args = "SELECT state, tx_hash FROM managed_tx WHERE signer = $1 AND nonce = $2", []any{signer, i / 20}
		case 1:
			sql, args = "SELECT tx_id, state FROM managed_tx WHERE signer = $1 AND request_id = $2", []any{signer, fmt.Sprintf("req-%d", i)}
		case 2:
			sql, args = "SELECT owner_node, fencing_token, expires_at FROM signer_lease WHERE signer = $1", []any{signer}
		case 3:
			sql, args = "SELECT next_nonce FROM signer_nonce_cursor WHERE signer = $1", []any{signer}
		default:
			sql, args = "SELECT tx_id, status FROM tx_completions WHERE seq > $1 ORDER BY seq LIMIT 100", []any{i % 50000}
		}
		during := migrating.Load()
		started := time.Now()
		rows, err := pool.Query(ctx, sql, args...)
		if err == nil {
			for rows.Next() {
			}
			rows.Close()
			err = rows.Err()
		}
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			stats.fail(fmt.Errorf("%s: %w", sql, err))
			continue
		}
		stats.took(time.Since(started))
		stats.reads.Add(1)
		if during && migrating.Load() {
			stats.readsDuringMigration.Add(1)
		}
	}
}

// An existing single-chain database moves to chain-keyed rows while the previous release
// keeps reading it: readers with a 2 s statement timeout read continuously and a long
// transaction holds locks on the tables the migration must alter for 3 s, yet no read
// fails. A read that queued behind that transaction would wait the 3 s and fail; one that
// only waited for a migration step's bounded lock attempt (300 ms) does not. (The timeout
// was 1 s; a run under -race with every package's tests sharing two cores took one read
// past it without any lock queue.) Every
// existing row gets the recorded chain, and the new keys let one signer hold a nonce once
// per chain.
func TestChainIDMigrationKeepsServingReads(t *testing.T) {
	t.Parallel()
	const txs, chainID = 200_000, 1337
	dsn := singleChainDatabase(t, txs, chainID)
	ctx := context.Background()

	readers := pgtest.NewPool(t, dsn, func(c *pgxpool.Config) {
		c.MaxConns = 4
		c.ConnConfig.RuntimeParams["statement_timeout"] = "2000"
	})
	var migrating atomic.Bool
	var stats readerStats
	readCtx, stopReading := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() { readContinuously(readCtx, readers, uint64(i+1), txs, &migrating, &stats) })
	}
	defer func() { stopReading(); wg.Wait() }()
	// Let the readers run before the migration, so the figures compare like with like.
	time.Sleep(300 * time.Millisecond)

	// A long transaction of the previous release holds its table locks for 3 s from the
	// moment the migration starts: a step that queued for them would hold every reader
	// arriving after it for those 3 s, well past their statement timeout.
	long, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer long.Close(ctx)
	longTx, err := long.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := longTx.Exec(ctx, "SELECT count(*) FROM signer_lease; SELECT count(*) FROM managed_tx WHERE signer = 'signer-1'"); err != nil {
		t.Fatal(err)
	}
	longEnded := make(chan time.Time, 1)
	go func() {
		time.Sleep(3 * time.Second)
		_ = longTx.Commit(ctx)
		longEnded <- time.Now()
	}()

	migrating.Store(true)
	started := time.Now()
	applied, err := repositories.Migrate(ctx, dsn, migrations.FS)
	took := time.Since(started)
	migrating.Store(false)
	finished := time.Now()
	time.Sleep(200 * time.Millisecond)
	stopReading()
	wg.Wait()
	if err != nil {
		t.Fatalf("migrate: %v", err)
	}
	if !slices.Contains(applied, chainIDMigration) {
		t.Fatalf("applied %v, want %s among them", applied, chainIDMigration)
	}
	if ended := <-longEnded; finished.Before(ended) {
		t.Fatalf("the migration finished at %s, before the long transaction ended at %s: it cannot have altered the tables that transaction locked", finished, ended)
	}
	if len(stats.errs) > 0 {
		t.Fatalf("%d+ reads failed during the migration, first: %v", len(stats.errs), errors.Join(stats.errs...))
	}
	if stats.readsDuringMigration.Load() == 0 {
		t.Fatalf("no read completed during the migration (%d in all)", stats.reads.Load())
	}
	t.Logf("migration of %d transactions took %s with a 3 s transaction in its way; %d reads during it, none failed, slowest read %s",
		txs, took.Round(time.Millisecond), stats.readsDuringMigration.Load(), stats.slowest.Round(time.Millisecond))

	check, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer check.Close(ctx)
	if n := rowsNotOnChain(ctx, t, check, chainID); n != 0 {
		t.Fatalf("%d existing rows did not get the recorded chain %d", n, chainID)
	}
	for _, c := range []struct{ what, sql string }{
		{"invalid indexes (an interrupted concurrent build)", "SELECT count(*) FROM pg_index WHERE NOT indisvalid"},
		{"indexes left under their building names", "SELECT count(*) FROM pg_class WHERE relkind = 'i' AND relname LIKE '%\\_by\\_chain'"},
		{"chain_id columns that still have a default", "SELECT count(*) FROM information_schema.columns WHERE table_schema = 'public' AND column_name = 'chain_id' AND column_default IS NOT NULL"},
		{"chain-keyed tables without chain_id", fmt.Sprintf("SELECT %d - count(*) FROM information_schema.columns WHERE table_schema = 'public' AND column_name = 'chain_id' AND table_name = ANY($1)", len(chainKeyedTables))},
	} {
		var n int
		args := []any{}
		if strings.Contains(c.sql, "$1") {
			args = append(args, chainKeyedTables)
		}
		if err := check.QueryRow(ctx, c.sql, args...).Scan(&n); err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		if n != 0 {
			t.Errorf("%s: %d", c.what, n)
		}
	}

	// The keys are per chain: signer-1's nonce 0 and its lease exist on chain 1337; the same
	// are free on another chain and refused a second time on the same one.
	for _, k := range []struct {
		name string
		sql  string
	}{
		{"nonce", `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, fencing_token)
			VALUES ($1, gen_random_uuid(), 'signer-1', '\x00', 0, '{"value":"0"}', 'ALLOCATED', 1)`},
		{"request id", `INSERT INTO managed_tx (chain_id, tx_id, signer, request_id, intent_hash, nonce, payload, state, fencing_token)
			VALUES ($1, gen_random_uuid(), 'signer-1', 'req-1', '\x00', 999999, '{"value":"0"}', 'ALLOCATED', 1)`},
		{"lease", `INSERT INTO signer_lease (chain_id, signer, owner_node, fencing_token, acquired_at, expires_at)
			VALUES ($1, 'signer-1', 'node-b', 1, now(), now())`},
		{"nonce cursor", "INSERT INTO signer_nonce_cursor (chain_id, signer, next_nonce, fencing_token) VALUES ($1, 'signer-1', 0, 1)"},
	} {
		if _, err := check.Exec(ctx, k.sql, 31337); err != nil {
			t.Errorf("%s of signer-1 on chain 31337: %v, want it free there", k.name, err)
		}
		var pgErr *pgconn.PgError
		if _, err := check.Exec(ctx, k.sql, chainID); !errors.As(err, &pgErr) || pgErr.Code != "23505" {
			t.Errorf("%s of signer-1 on chain %d a second time: %v, want a unique violation", k.name, chainID, err)
		}
	}
}

// The chain of existing rows comes from the database's record, else from the configuration;
// a database with rows and neither is refused and left as it was, so nothing is guessed.
func TestChainIDMigrationTakesTheChainOfExistingRows(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		txs        int
		recorded   int64
		configured uint64
		wantChain  int64
		wantErr    string
	}{
		{name: "recorded chain", txs: 100, recorded: 1337, wantChain: 1337},
		{name: "recorded chain wins over the configured one", txs: 100, recorded: 1337, configured: 5, wantChain: 1337},
		{name: "configured chain when none is recorded", txs: 100, configured: 5, wantChain: 5},
		{name: "rows but no chain", txs: 100, wantErr: "no recorded chain"},
		{name: "an empty database needs no chain", txs: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			dsn := singleChainDatabase(t, tt.txs, tt.recorded)
			_, err := repositories.Migrate(ctx, dsn, migrations.FS, repositories.MigrateOptions{ConfiguredChainID: tt.configured})
			conn, cerr := pgx.Connect(ctx, dsn)
			if cerr != nil {
				t.Fatal(cerr)
			}
			defer conn.Close(ctx)
			var recorded bool
			if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = $1)", chainIDMigration).Scan(&recorded); err != nil {
				t.Fatal(err)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("migrate: %v, want an error saying %q", err, tt.wantErr)
				}
				var columns int
				if err := conn.QueryRow(ctx, "SELECT count(*) FROM information_schema.columns WHERE column_name = 'chain_id' AND table_name = ANY($1)", chainKeyedTables).Scan(&columns); err != nil {
					t.Fatal(err)
				}
				if recorded || columns != 0 {
					t.Fatalf("a refused migration left %d chain_id columns (recorded: %v)", columns, recorded)
				}
				return
			}
			if err != nil {
				t.Fatalf("migrate: %v", err)
			}
			if !recorded {
				t.Fatalf("%s not recorded", chainIDMigration)
			}
			if n := rowsNotOnChain(ctx, t, conn, tt.wantChain); tt.txs > 0 && n != 0 {
				t.Fatalf("%d rows not on chain %d", n, tt.wantChain)
			}
		})
	}
}

// Nodes that start together migrate together: one applies, the others wait for it without
// deadlocking on its concurrent index builds, and all of them start.
func TestConcurrentMigratorsAllSucceed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := pgtest.NewDatabase(t)
	const nodes = 3
	applied := make([][]string, nodes)
	errs := make([]error, nodes)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Go(func() {
			applied[i], errs[i] = repositories.Migrate(ctx, dsn, migrations.FS, repositories.MigrateOptions{ConfiguredChainID: 1337})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("a migrator failed: %v", err)
	}
	names, err := fs.Glob(migrations.FS, "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, a := range applied {
		total += len(a)
	}
	if total != len(names) {
		t.Fatalf("the migrators applied %d files between them (%v), want each of the %d once", total, applied, len(names))
	}
}
