package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/jackc/pgx/v5"

	"github.com/bionicotaku/txmanager-service/internal/e2e"
)

// row is one line of the result table.
type row struct {
	name  string
	value int
	want  string // "0", "> 0", "= <n>", ">= <n>", "<= <n>", or "" (informational)
}

func (r row) ok() bool {
	switch {
	case r.want == "0":
		return r.value == 0
	case r.want == "> 0":
		return r.value > 0
	case strings.HasPrefix(r.want, "= "):
		return fmt.Sprint(r.value) == strings.TrimPrefix(r.want, "= ")
	case strings.HasPrefix(r.want, ">= "):
		var bound int
		_, err := fmt.Sscan(strings.TrimPrefix(r.want, ">= "), &bound)
		return err == nil && r.value >= bound
	case strings.HasPrefix(r.want, "<= "):
		var bound int
		_, err := fmt.Sscan(strings.TrimPrefix(r.want, "<= "), &bound)
		return err == nil && r.value <= bound
	default:
		return true
	}
}

func printTable(title string, rows []row) bool {
	fmt.Printf("\n%s\n", title)
	fmt.Printf("  %-52s %10s  %-8s %s\n", "check", "value", "want", "")
	all := true
	for _, r := range rows {
		mark := ""
		if r.want != "" {
			mark = "ok"
			if !r.ok() {
				mark, all = "FAIL", false
			}
		}
		fmt.Printf("  %-52s %10d  %-8s %s\n", r.name, r.value, r.want, mark)
	}
	return all
}

// waitFinal waits until every managed transaction is final; it returns how many are not.
func waitFinal(ctx context.Context, db *pgx.Conn, timeout time.Duration) (int, error) {
	deadline := time.Now().Add(timeout)
	for {
		var open int
		if err := db.QueryRow(ctx, "SELECT count(*) FROM managed_tx WHERE state NOT IN ('CONFIRMED', 'FAILED_FINAL')").Scan(&open); err != nil {
			return -1, err
		}
		if open == 0 || time.Now().After(deadline) {
			return open, nil
		}
		select {
		case <-ctx.Done():
			return open, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// checkRun verifies the invariants over the database, the chain and the nodes' logs; open
// is what waitFinal last counted as not final.
//
// leaseFaults says the run made nodes lose leases, so fenced writes and takeovers must
// have happened; a run with a single node has none to show.
func checkRun(ctx context.Context, db *pgx.Conn, chainURL string, api *e2e.Client, rec *loadRecord, logs []string, signers []common.Address, open int, leaseFaults bool) ([]row, error) {
	var rows []row
	count := func(sql string, args ...any) (int, error) {
		var n int
		err := db.QueryRow(ctx, sql, args...).Scan(&n)
		return n, err
	}
	must := func(name, want, sql string, args ...any) error {
		n, err := count(sql, args...)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		rows = append(rows, row{name, n, want})
		return nil
	}

	rec.mu.Lock()
	attempted, acked, replays, replayDiffs := rec.attempted, len(rec.acknowledged), rec.replays, rec.replayDiffs
	ackedIDs := make([]string, 0, acked)
	for id := range rec.acknowledged {
		ackedIDs = append(ackedIDs, id)
	}
	failed := fmt.Sprint(rec.failed)
	rec.mu.Unlock()
	rows = append(rows, row{"creates attempted", attempted, ""}, row{"creates acknowledged (txId returned)", acked, "> 0"})
	if err := must("acknowledged creates lost", "0",
		"SELECT count(*) FROM unnest($1::uuid[]) AS a(id) WHERE NOT EXISTS (SELECT 1 FROM managed_tx m WHERE m.tx_id = a.id)", ackedIDs); err != nil {
		return nil, err
	}
	rows = append(rows, row{"idempotent replays checked", replays, ""}, row{"replays answered with another tx", replayDiffs, "0"})
	if err := must("duplicate nonces (signer, nonce)", "0",
		"SELECT count(*) FROM (SELECT signer, nonce FROM managed_tx GROUP BY 1, 2 HAVING count(*) > 1) d"); err != nil {
		return nil, err
	}
	// Allocation order must never go backwards: a later batch of a signer never got a lower
	// nonce than an earlier one (created_at is the batch's time; same-batch rows tie).
	if err := must("nonce regressions (later allocation, lower nonce)", "0", `
		SELECT count(*) FROM (
		  SELECT nonce, max(nonce) OVER (PARTITION BY signer ORDER BY created_at, nonce ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before
		  FROM managed_tx) t WHERE t.nonce < t.before`); err != nil {
		return nil, err
	}
	if err := must("gaps in a signer's nonces", "0", `
		SELECT count(*) FROM (SELECT signer, max(nonce) + 1 - count(*) AS missing FROM managed_tx GROUP BY signer) g WHERE missing <> 0`); err != nil {
		return nil, err
	}
	if err := must("nonces broadcast for two different txs", "0",
		"SELECT count(*) FROM (SELECT signer, nonce FROM tx_attempt GROUP BY 1, 2 HAVING count(DISTINCT tx_id) > 1) d"); err != nil {
		return nil, err
	}
	final, err := count("SELECT count(*) FROM managed_tx WHERE state IN ('CONFIRMED', 'FAILED_FINAL')")
	if err != nil {
		return nil, fmt.Errorf("transactions final: %w", err)
	}
	rows = append(rows, row{"transactions not final", open, "0"}, row{"transactions final", final, "> 0"})
	if err := must("final without a completion / completion twice", "0", finalWithoutOneCompletion); err != nil {
		return nil, err
	}

	// The feed as a consumer reads it: every final transaction exactly once.
	feed, err := api.ReadCompletions(ctx, 250, final, time.Minute)
	if err != nil {
		return nil, fmt.Errorf("completions feed: %w", err)
	}
	seen := map[string]int{}
	for _, c := range feed {
		seen[c.GetTxId()]++
	}
	dupes := 0
	for _, n := range seen {
		if n > 1 {
			dupes++
		}
	}
	rows = append(rows, row{"completions missing from the feed", final - len(seen), "0"}, row{"completions served twice", dupes, "0"})

	// The chain agrees: each signer's on-chain nonce equals its managed transactions, and
	// every confirmed one is on chain with its recorded hash, sender and nonce.
	eth, err := ethclient.DialContext(ctx, chainURL)
	if err != nil {
		return nil, err
	}
	defer eth.Close()
	managed, err := managedPerSigner(ctx, db)
	if err != nil {
		return nil, err
	}
	mismatched := 0
	for _, s := range signers {
		onChain, err := eth.NonceAt(ctx, s, nil)
		if err != nil {
			return nil, err
		}
		if int(onChain) != managed[s.Hex()] {
			mismatched++
		}
	}
	rows = append(rows, row{"signers whose chain nonce != managed txs", mismatched, "0"})
	problems, err := confirmedNotOnChain(ctx, db, eth)
	if err != nil {
		return nil, err
	}
	rows = append(rows, row{"confirmed txs not on chain as recorded", problems, "0"})

	if !leaseFaults {
		fmt.Printf("  creates never acknowledged, by last answer: %s\n", failed)
		return rows, nil
	}
	fenced := 0
	for _, path := range logs {
		n, err := countLogLines(path, `"msg":"write fenced"`)
		if err != nil {
			return nil, err
		}
		fenced += n
	}
	rows = append(rows, row{"fenced writes observed (faults bit)", fenced, "> 0"})
	if err := must("lease takeovers (token increments)", "> 0", "SELECT coalesce(sum(fencing_token - 1), 0)::int FROM signer_lease"); err != nil {
		return nil, err
	}
	fmt.Printf("  creates never acknowledged, by last answer: %s\n", failed)
	return rows, nil
}

// managedPerSigner counts the managed transactions of each signer (as stored: its Hex form);
// a signer with none is missing from the map.
func managedPerSigner(ctx context.Context, db *pgx.Conn) (map[string]int, error) {
	rs, err := db.Query(ctx, "SELECT signer, count(*) FROM managed_tx GROUP BY signer")
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	out := map[string]int{}
	for rs.Next() {
		var signer string
		var n int
		if err := rs.Scan(&signer, &n); err != nil {
			return nil, err
		}
		out[signer] = n
	}
	return out, rs.Err()
}

// finalWithoutOneCompletion counts the final transactions whose completion is missing or
// written twice.
const finalWithoutOneCompletion = `SELECT count(*) FROM managed_tx m WHERE m.state IN ('CONFIRMED', 'FAILED_FINAL')
	AND (SELECT count(*) FROM tx_completions c WHERE c.tx_id = m.tx_id) <> 1`

// confirmedNotOnChain counts the CONFIRMED transactions the chain does not hold as recorded
// (hash, sender, nonce, block) and prints the first few.
func confirmedNotOnChain(ctx context.Context, db *pgx.Conn, eth *ethclient.Client) (int, error) {
	expected, err := confirmedOnRecord(ctx, db)
	if err != nil {
		return 0, err
	}
	results, err := e2e.CheckOnChain(ctx, eth, expected, 8)
	if err != nil {
		return 0, err
	}
	problems := 0
	for _, r := range results {
		if r != nil {
			problems++
			if problems <= 3 {
				fmt.Printf("  on-chain mismatch: %v\n", r)
			}
		}
	}
	return problems, nil
}

func confirmedOnRecord(ctx context.Context, db *pgx.Conn) ([]e2e.ExpectedTx, error) {
	rs, err := db.Query(ctx, "SELECT tx_id::text, signer, nonce, tx_hash, block_number FROM managed_tx WHERE state = 'CONFIRMED'")
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []e2e.ExpectedTx
	for rs.Next() {
		var id, signer, hash string
		var nonce, block int64
		if err := rs.Scan(&id, &signer, &nonce, &hash, &block); err != nil {
			return nil, err
		}
		out = append(out, e2e.ExpectedTx{TxID: id, Signer: common.HexToAddress(signer), Nonce: uint64(nonce), TxHash: common.HexToHash(hash), BlockNumber: uint64(block)})
	}
	return out, rs.Err()
}

func countLogLines(path, needle string) (int, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }() // read only
	n := 0
	scanner := bufio.NewScanner(f)
	scanner.Buffer(make([]byte, 1<<20), 1<<20)
	for scanner.Scan() {
		if strings.Contains(scanner.Text(), needle) {
			n++
		}
	}
	return n, scanner.Err()
}
