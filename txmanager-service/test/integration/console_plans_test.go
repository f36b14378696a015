package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
)

// consoleQueries reads the console's queries from their sqlc file, each with its name, and
// numbers their parameters as PostgreSQL does, so the plans checked are the SQL the service
// runs.
func consoleQueries(t *testing.T) map[string]string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "internal", "repositories", "queries", "console.sql"))
	if err != nil {
		t.Fatal(err)
	}
	param := regexp.MustCompile(`sqlc\.arg\((\w+)\)|@(\w+)`)
	out := map[string]string{}
	for _, part := range strings.Split(string(raw), "-- name: ")[1:] {
		name, body, _ := strings.Cut(part, "\n")
		name = strings.Fields(name)[0]
		var order []string
		body = param.ReplaceAllStringFunc(body, func(m string) string {
			sub := param.FindStringSubmatch(m)
			p := sub[1] + sub[2]
			i := slices.Index(order, p)
			if i < 0 {
				order = append(order, p)
				i = len(order) - 1
			}
			return "$" + strconv.Itoa(i+1)
		})
		out[name] = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(body), ";"))
	}
	return out
}

// With many transactions in the tables (CONSOLE_ROWS, 20,000 by default; make
// console-plans loads 1,000,000), every console query's plan reads through an index, no page
// makes the database scan a large table, and each page's server time is reported.
func TestConsolePagesUseIndexes(t *testing.T) {
	t.Parallel()
	rows := 20_000
	if v := os.Getenv("CONSOLE_ROWS"); v != "" {
		var err error
		if rows, err = strconv.Atoi(v); err != nil || rows < 10_000 {
			t.Fatalf("CONSOLE_ROWS=%q: want a count of at least 10000", v)
		}
	}
	const fakeSigners = 10
	sim := newTestChain(t, 250*time.Millisecond)
	s := startService(t, serviceOptions{chain: sim, signers: 1, fastPipeline: true})
	seed := s.createOK(t, map[string]any{"signer": devAddress(t, 0), "to": devAddress(t, 6), "value": "1", "gasLimit": 21000, "requestId": "console-seed"})
	waitFor(t, 30*time.Second, "the seed transaction final in the feed", func() bool {
		return s.count(t, `SELECT count(*) FROM tx_completions WHERE tx_id = $1 AND feed_position IS NOT NULL`, seed) == 1
	})

	// Clone the seed (its row, attempt and completion) for signers the service does not
	// serve, so its loops leave them alone.
	var signers []string
	for i := range fakeSigners {
		signers = append(signers, common.BigToAddress(common.Big1).Hex()[:41]+strconv.Itoa(i))
	}
	ctx := context.Background()
	start := time.Now()
	perSigner := rows / fakeSigners
	for _, signer := range signers {
		tx, err := s.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, statement := range []string{
			cloneStatement(t, s, "managed_tx", "src", map[string]string{
				"tx_id": "gen_random_uuid()", "signer": "$2::text", "nonce": "g", "request_id": "'bulk-' || $2 || '-' || g",
				"tx_hash": "'0x' || md5($2 || g::text) || md5(g::text || $2)",
			}, "FROM managed_tx src, generate_series(0, $3::int - 1) g WHERE src.tx_id = $1"),
			cloneStatement(t, s, "tx_attempt", "a", map[string]string{"tx_id": "m.tx_id", "tx_hash": "m.tx_hash", "signer": "m.signer", "nonce": "m.nonce"},
				"FROM managed_tx m, tx_attempt a WHERE m.chain_id = 1337 AND m.signer = $2 AND a.tx_id = $1 AND $3::int > 0"),
			`INSERT INTO signer_nonce_cursor (chain_id, signer, next_nonce, fencing_token) SELECT 1337, $2, $3, 1 WHERE $1::uuid IS NOT NULL`,
		} {
			if _, err := tx.Exec(ctx, statement, seed, signer, perSigner); err != nil {
				t.Fatalf("load %s: %v", signer, err)
			}
		}
		// Completions take positions under the sequencer's lock, as the service's do.
		if _, err := tx.Exec(ctx, `
			WITH last AS (SELECT last_position FROM feed_sequencer WHERE id FOR UPDATE),
			added AS (
			    INSERT INTO tx_completions (tx_id, signer, status, completed_at, chain_id, feed_position, positioned_at)
			    SELECT m.tx_id, m.signer, 'CONFIRMED', now(), m.chain_id, last.last_position + row_number() OVER (ORDER BY m.nonce), now()
			    FROM managed_tx m, last WHERE m.chain_id = 1337 AND m.signer = $1
			    RETURNING feed_position)
			UPDATE feed_sequencer SET last_position = (SELECT max(feed_position) FROM added) WHERE id`, signer); err != nil {
			t.Fatalf("completions of %s: %v", signer, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.pool.Exec(ctx, `ANALYZE managed_tx, tx_attempt, tx_completions, signer_nonce_cursor`); err != nil {
		t.Fatal(err)
	}
	total := s.count(t, `SELECT count(*) FROM managed_tx`)
	t.Logf("loaded %d transactions (%d attempts, %d completions) in %s", total, s.count(t, `SELECT count(*) FROM tx_attempt`),
		s.count(t, `SELECT count(*) FROM tx_completions`), time.Since(start).Round(time.Second))

	// Each of the console's own queries: its plan reads an index.
	signer := signers[3]
	var someID, someHash string
	if err := s.pool.QueryRow(ctx, `SELECT tx_id::text, tx_hash FROM managed_tx WHERE chain_id = 1337 AND signer = $1 AND nonce = $2`, signer, perSigner/2).Scan(&someID, &someHash); err != nil {
		t.Fatal(err)
	}
	params := map[string][]any{
		"ConsoleSignerTxs":      {1337, signer, perSigner / 2, 50},
		"ConsoleOpenTxs":        {1337, signer, 50},
		"ConsoleTxAttempts":     {someID},
		"ConsoleTxCompletedAt":  {someID},
		"ConsoleTxIDByHash":     {someHash},
		"ConsoleTxsByRequestID": {fmt.Sprintf("bulk-%s-%d", signer, perSigner/3), 50},
		"ConsoleRecentAudit":    {100},
	}
	queries := consoleQueries(t)
	if len(queries) != len(params) {
		t.Fatalf("console.sql has %d queries, the test plans %d: give each new query its parameters here", len(queries), len(params))
	}
	big := regexp.MustCompile(`Seq Scan on (managed_tx|tx_attempt|tx_completions|audit_record)\b`)
	for name, sql := range queries {
		args, ok := params[name]
		if !ok {
			t.Fatalf("no parameters for %s", name)
		}
		plan := explain(t, s, sql, args...)
		t.Logf("%s:\n%s", name, plan)
		if m := big.FindString(plan); m != "" {
			t.Errorf("%s scans a large table (%s) at %d transactions", name, m, total)
		}
	}

	// Every page, timed as the browser sees it, with no sequential scan of the large
	// tables while the pages are served.
	client, _ := consoleSession(t, s.httpURL, "")
	pages := []string{
		"/console",
		"/console/signers/1337/" + signer,
		fmt.Sprintf("/console/signers/1337/%s?before=%d", signer, perSigner/2),
		"/console/tx/" + someID,
		"/console/stuck",
		"/console/quarantines",
		"/console/approvals",
		"/console/audit",
		"/console/search?q=" + fmt.Sprintf("bulk-%s-%d", signer, perSigner/3),
		"/console/search?q=" + someHash,
	}
	before := seqScans(t, s)
	for _, page := range pages {
		var times []time.Duration
		for range 5 {
			began := time.Now()
			resp, err := client.Get(s.httpURL + page)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			times = append(times, time.Since(began))
			want := http.StatusOK
			if strings.HasPrefix(page, "/console/search") {
				want = http.StatusSeeOther // one transaction found: its page
			}
			if resp.StatusCode != want {
				t.Fatalf("%s: %d, want %d", page, resp.StatusCode, want)
			}
		}
		slices.Sort(times)
		t.Logf("page %-70s median %6.1f ms (min %.1f, max %.1f)", page, ms(times[2]), ms(times[0]), ms(times[4]))
	}
	after := seqScans(t, s)
	for table, n := range after {
		if n > before[table] {
			t.Errorf("%d sequential scans of %s while the pages were served", n-before[table], table)
		}
	}
}

// cloneStatement is an INSERT INTO table of the rows "SELECT ... from" gives, every column
// copied from the alias's row but those set in changed.
func cloneStatement(t *testing.T, s *testService, table, alias string, changed map[string]string, from string) string {
	t.Helper()
	rows, err := s.pool.Query(context.Background(), `SELECT column_name FROM information_schema.columns WHERE table_name = $1 ORDER BY ordinal_position`, table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var columns, values []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			t.Fatal(err)
		}
		columns = append(columns, c)
		if v, ok := changed[c]; ok {
			values = append(values, v)
		} else {
			values = append(values, alias+"."+c)
		}
	}
	return "INSERT INTO " + table + " (" + strings.Join(columns, ", ") + ") SELECT " + strings.Join(values, ", ") + " " + from
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func explain(t *testing.T, s *testService, sql string, args ...any) string {
	t.Helper()
	rows, err := s.pool.Query(context.Background(), "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) "+sql, args...)
	if err != nil {
		t.Fatalf("explain %s: %v", sql, err)
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, "  "+line)
	}
	return strings.Join(lines, "\n")
}

// seqScans counts the sequential scans of the tables that grow with traffic.
func seqScans(t *testing.T, s *testService) map[string]int64 {
	t.Helper()
	// The statistics collector is read from a snapshot taken at the first read of a
	// transaction; clear it so the counts are current.
	if _, err := s.pool.Exec(context.Background(), `SELECT pg_stat_clear_snapshot()`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // a backend flushes its counters at most once a second
	rows, err := s.pool.Query(context.Background(), `SELECT relname, seq_scan FROM pg_stat_user_tables WHERE relname IN ('managed_tx', 'tx_attempt', 'tx_completions', 'audit_record')`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		out[name] = n
	}
	return out
}
