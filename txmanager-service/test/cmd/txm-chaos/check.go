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

	"github.com/bionicotaku/txmanager-service/test/e2e"
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
	fmt.Printf("  %-64s %10s  %-8s %s\n", "check", "value", "want", "")
	all := true
	for _, r := range rows {
		mark := ""
		if r.want != "" {
			mark = "ok"
			if !r.ok() {
				mark, all = "FAIL", false
			}
		}
		fmt.Printf("  %-64s %10d  %-8s %s\n", r.name, r.value, r.want, mark)
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

// runCheck is what checkRun verifies: the run's database, the chains its load went to, a
// node's API (for the completion feed), what the load saw, and the nodes' logs.
type runCheck struct {
	db *pgx.Conn
	// chains are the chains the run sent to; an ID of 0 is the chain's own (a single-chain
	// run whose creates name no chain).
	chains  []e2e.ChainTarget
	api     *e2e.Client
	rec     *loadRecord
	logs    []string
	signers []common.Address
	// leaseFaults says the run made nodes lose leases, so fenced writes and takeovers must
	// have happened; a run with a single node has none to show.
	leaseFaults bool
}

// checkedChain is one chain as the checker reads it: its id as the chain itself reports
// it, and a client for it.
type checkedChain struct {
	id  uint64
	eth *ethclient.Client
}

// dialChain connects to target and makes sure it serves the chain target names (an ID of 0
// takes the chain's own). The checker selects a chain's rows by this id, so rows of one
// chain are never compared with another chain.
func dialChain(ctx context.Context, target e2e.ChainTarget) (checkedChain, error) {
	eth, err := ethclient.DialContext(ctx, target.RPCURL)
	if err != nil {
		return checkedChain{}, fmt.Errorf("dial chain %s: %w", target.RPCURL, err)
	}
	id, err := eth.ChainID(ctx)
	if err != nil {
		eth.Close()
		return checkedChain{}, fmt.Errorf("chain id of %s: %w", target.RPCURL, err)
	}
	if target.ID != 0 && id.Uint64() != target.ID {
		eth.Close()
		return checkedChain{}, fmt.Errorf("%s serves chain %s, not %d", target.RPCURL, id, target.ID)
	}
	return checkedChain{id: id.Uint64(), eth: eth}, nil
}

// checkRun verifies the invariants over the database, the chains and the nodes' logs: the
// load's totals and what holds across the cluster once, every invariant of a chain once per
// chain, its rows named after the chain.
func checkRun(ctx context.Context, c runCheck) ([]row, error) {
	chains := make([]checkedChain, 0, len(c.chains))
	for _, target := range c.chains {
		ch, err := dialChain(ctx, target)
		if err != nil {
			return nil, err
		}
		defer ch.eth.Close()
		chains = append(chains, ch)
	}

	c.rec.mu.Lock()
	attempted, acked, replays, replayDiffs, otherChain := c.rec.attempted, len(c.rec.acknowledged), c.rec.replays, c.rec.replayDiffs, c.rec.otherChain
	failed := fmt.Sprint(c.rec.failed)
	c.rec.mu.Unlock()
	rows := []row{
		{"creates attempted", attempted, ""},
		{"creates acknowledged (txId returned)", acked, "> 0"},
		{"idempotent replays checked", replays, ""},
		{"replays answered with another tx", replayDiffs, "0"},
		{"creates acknowledged on another chain than named", otherChain, "0"},
	}

	ackedOn := c.rec.ackedOn()
	perChain := make([][]row, len(chains))
	finalOn := make([]int, len(chains))
	finals := 0
	for i, ch := range chains {
		var err error
		if perChain[i], finalOn[i], err = checkChainRecords(ctx, c.db, ch.id, ackedOn[ch.id]); err != nil {
			return nil, fmt.Errorf("chain %d: %w", ch.id, err)
		}
		finals += finalOn[i]
	}

	// The feed as a consumer reads it: every final transaction exactly once, under its
	// chain. One read of the whole feed, split by the chain each completion names.
	feed, err := c.api.ReadCompletions(ctx, 250, finals, time.Minute)
	if err != nil {
		return nil, fmt.Errorf("completions feed: %w", err)
	}
	served := map[uint64]map[string]int{} // chain -> tx id -> times served
	for _, cpl := range feed {
		if served[cpl.GetChainId()] == nil {
			served[cpl.GetChainId()] = map[string]int{}
		}
		served[cpl.GetChainId()][cpl.GetTxId()]++
	}
	for i, ch := range chains {
		dupes := 0
		for _, n := range served[ch.id] {
			if n > 1 {
				dupes++
			}
		}
		perChain[i] = append(perChain[i],
			row{"completions missing from the feed", finalOn[i] - len(served[ch.id]), "0"},
			row{"completions served twice", dupes, "0"})
		chainRows, err := checkChainState(ctx, c.db, ch, c.signers)
		if err != nil {
			return nil, fmt.Errorf("chain %d: %w", ch.id, err)
		}
		for _, r := range append(perChain[i], chainRows...) {
			r.name = fmt.Sprintf("chain %d: %s", ch.id, r.name)
			rows = append(rows, r)
		}
	}

	// Every row belongs to a chain checked above, so no row escaped the checks.
	checkedIDs := make([]int64, len(chains))
	for i, ch := range chains {
		checkedIDs[i] = int64(ch.id)
	}
	unchecked, err := countOf(ctx, c.db, "SELECT count(*) FROM managed_tx WHERE NOT chain_id = ANY($1)", checkedIDs)
	if err != nil {
		return nil, fmt.Errorf("managed txs on other chains: %w", err)
	}
	rows = append(rows, row{"managed txs on a chain not checked", unchecked, "0"})

	fmt.Printf("  creates never acknowledged, by last answer: %s\n", failed)
	if !c.leaseFaults {
		return rows, nil
	}
	fenced := 0
	for _, path := range c.logs {
		n, err := countLogLines(path, `"msg":"write fenced"`)
		if err != nil {
			return nil, err
		}
		fenced += n
	}
	rows = append(rows, row{"fenced writes observed (faults bit)", fenced, "> 0"})
	takeovers, err := countOf(ctx, c.db, "SELECT coalesce(sum(fencing_token - 1), 0)::int FROM signer_lease")
	if err != nil {
		return nil, fmt.Errorf("lease takeovers: %w", err)
	}
	return append(rows, row{"lease takeovers (token increments)", takeovers, "> 0"}), nil
}

// checkChainRecords checks the database's rows of one chain: what the load was told is
// there, each signer's nonces (given once, in order, without gaps, each broadcast for one
// transaction), and every transaction final with one completion. final is how many are.
func checkChainRecords(ctx context.Context, db *pgx.Conn, chainID uint64, ackedIDs []string) (rows []row, final int, err error) {
	rows = []row{{"creates acknowledged on this chain", len(ackedIDs), "> 0"}}
	lost, err := countOf(ctx, db,
		"SELECT count(*) FROM unnest($2::uuid[]) AS a(id) WHERE NOT EXISTS (SELECT 1 FROM managed_tx m WHERE m.tx_id = a.id AND m.chain_id = $1)",
		chainID, ackedIDs)
	if err != nil {
		return nil, 0, fmt.Errorf("acknowledged creates lost: %w", err)
	}
	rows = append(rows, row{"acknowledged creates lost", lost, "0"})
	// Each query counts what must not exist on the chain $1.
	for _, check := range []struct{ name, sql string }{
		{"duplicate nonces (signer, nonce)",
			"SELECT count(*) FROM (SELECT signer, nonce FROM managed_tx WHERE chain_id = $1 GROUP BY 1, 2 HAVING count(*) > 1) d"},
		// Allocation order must never go backwards: a later batch of a signer never got a
		// lower nonce than an earlier one (created_at is the batch's time; same-batch rows tie).
		{"nonce regressions (later allocation, lower nonce)", `
			SELECT count(*) FROM (
			  SELECT nonce, max(nonce) OVER (PARTITION BY signer ORDER BY created_at, nonce ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before
			  FROM managed_tx WHERE chain_id = $1) t WHERE t.nonce < t.before`},
		{"gaps in a signer's nonces", `
			SELECT count(*) FROM (SELECT signer, max(nonce) + 1 - count(*) AS missing FROM managed_tx WHERE chain_id = $1 GROUP BY signer) g WHERE missing <> 0`},
		{"nonces broadcast for two different txs",
			"SELECT count(*) FROM (SELECT signer, nonce FROM tx_attempt WHERE chain_id = $1 GROUP BY 1, 2 HAVING count(DISTINCT tx_id) > 1) d"},
		{"transactions not final",
			"SELECT count(*) FROM managed_tx WHERE chain_id = $1 AND state NOT IN ('CONFIRMED', 'FAILED_FINAL')"},
	} {
		n, err := countOf(ctx, db, check.sql, chainID)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %w", check.name, err)
		}
		rows = append(rows, row{check.name, n, "0"})
	}
	if final, err = countOf(ctx, db, "SELECT count(*) FROM managed_tx WHERE chain_id = $1 AND state IN ('CONFIRMED', 'FAILED_FINAL')", chainID); err != nil {
		return nil, 0, fmt.Errorf("transactions final: %w", err)
	}
	rows = append(rows, row{"transactions final", final, "> 0"})
	noCompletion, err := countOf(ctx, db, finalWithoutOneCompletion, chainID)
	if err != nil {
		return nil, 0, fmt.Errorf("final without a completion: %w", err)
	}
	return append(rows, row{"final without a completion / completion twice", noCompletion, "0"}), final, nil
}

// checkChainState compares a chain with the database's rows of it: each signer's nonce on
// the chain equals its managed transactions there, and every confirmed one is on the chain
// with its recorded hash, sender, nonce and block.
func checkChainState(ctx context.Context, db *pgx.Conn, ch checkedChain, signers []common.Address) ([]row, error) {
	managed, err := managedPerSigner(ctx, db, ch.id)
	if err != nil {
		return nil, err
	}
	mismatched := 0
	for _, s := range signers {
		onChain, err := ch.eth.NonceAt(ctx, s, nil)
		if err != nil {
			return nil, fmt.Errorf("nonce of %s: %w", s, err)
		}
		if int(onChain) != managed[s.Hex()] {
			mismatched++
		}
	}
	problems, err := confirmedNotOnChain(ctx, db, ch)
	if err != nil {
		return nil, err
	}
	return []row{
		{"signers whose chain nonce != managed txs", mismatched, "0"},
		{"confirmed txs not on chain as recorded", problems, "0"},
	}, nil
}

// countOf runs a query that answers one count.
func countOf(ctx context.Context, db *pgx.Conn, sql string, args ...any) (int, error) {
	var n int
	err := db.QueryRow(ctx, sql, args...).Scan(&n)
	return n, err
}

// managedPerSigner counts the managed transactions of each signer on a chain (as stored:
// its Hex form); a signer with none is missing from the map.
func managedPerSigner(ctx context.Context, db *pgx.Conn, chainID uint64) (map[string]int, error) {
	rs, err := db.Query(ctx, "SELECT signer, count(*) FROM managed_tx WHERE chain_id = $1 GROUP BY signer", chainID)
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

// finalWithoutOneCompletion counts the final transactions of the chain $1 whose completion
// (on that chain) is missing or written twice.
const finalWithoutOneCompletion = `SELECT count(*) FROM managed_tx m WHERE m.chain_id = $1 AND m.state IN ('CONFIRMED', 'FAILED_FINAL')
	AND (SELECT count(*) FROM tx_completions c WHERE c.tx_id = m.tx_id AND c.chain_id = m.chain_id) <> 1`

// confirmedNotOnChain counts the CONFIRMED transactions of the chain that the chain does not
// hold as recorded (hash, sender, nonce, block) and prints the first few.
func confirmedNotOnChain(ctx context.Context, db *pgx.Conn, ch checkedChain) (int, error) {
	expected, err := confirmedOnRecord(ctx, db, ch.id)
	if err != nil {
		return 0, err
	}
	results, err := e2e.CheckOnChain(ctx, ch.eth, expected, 8)
	if err != nil {
		return 0, err
	}
	problems := 0
	for _, r := range results {
		if r != nil {
			problems++
			if problems <= 3 {
				fmt.Printf("  on-chain mismatch on chain %d: %v\n", ch.id, r)
			}
		}
	}
	return problems, nil
}

// confirmedOnRecord is what the database holds of the CONFIRMED transactions of a chain.
func confirmedOnRecord(ctx context.Context, db *pgx.Conn, chainID uint64) ([]e2e.ExpectedTx, error) {
	rs, err := db.Query(ctx, "SELECT tx_id::text, signer, nonce, tx_hash, block_number FROM managed_tx WHERE chain_id = $1 AND state = 'CONFIRMED'", chainID)
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
