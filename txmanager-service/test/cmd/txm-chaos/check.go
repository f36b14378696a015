package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/jackc/pgx/v5"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
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

// printTable writes the rows under title with each checked row's verdict; it reports
// whether every check held.
func printTable(w io.Writer, title string, rows []row) bool {
	fmt.Fprintf(w, "\n%s\n", title)
	fmt.Fprintf(w, "  %-64s %10s  %-8s %s\n", "check", "value", "want", "")
	all := true
	for _, r := range rows {
		mark := ""
		if r.want != "" {
			mark = "ok"
			if !r.ok() {
				mark, all = "FAIL", false
			}
		}
		fmt.Fprintf(w, "  %-64s %10d  %-8s %s\n", r.name, r.value, r.want, mark)
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
	records := make([]chainRecords, len(chains))
	finals := 0
	for i, ch := range chains {
		var err error
		if records[i], err = readChainRecords(ctx, c.db, ch.id); err != nil {
			return nil, fmt.Errorf("chain %d: %w", ch.id, err)
		}
		finals += finalCount(records[i].txs)
	}

	// The feed as a consumer reads it: every final transaction exactly once, under its
	// chain. One read of the whole feed, split by the chain each completion names.
	feed, err := c.api.ReadCompletions(ctx, 250, finals, time.Minute)
	if err != nil {
		return nil, fmt.Errorf("completions feed: %w", err)
	}
	served := servedPerChain(feed)
	for i, ch := range chains {
		missing, twice := feedCounts(records[i].txs, served[ch.id])
		chainRows := append(recordRows(ackedOn[ch.id], records[i]),
			row{"completions missing from the feed", missing, "0"},
			row{"completions served twice", twice, "0"})
		stateRows, err := checkChainState(ctx, ch, records[i], c.signers)
		if err != nil {
			return nil, fmt.Errorf("chain %d: %w", ch.id, err)
		}
		for _, r := range append(chainRows, stateRows...) {
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

// servedPerChain is how often the feed served each tx id (lower case), per the chain each
// completion names.
func servedPerChain(feed []*v1.Completion) map[uint64]map[string]int {
	served := map[uint64]map[string]int{}
	for _, cpl := range feed {
		if served[cpl.GetChainId()] == nil {
			served[cpl.GetChainId()] = map[string]int{}
		}
		served[cpl.GetChainId()][strings.ToLower(cpl.GetTxId())]++
	}
	return served
}

// readChainRecords reads what the database holds of the chain chainID: its managed
// transactions, each with its number of completions, and its signed attempts.
func readChainRecords(ctx context.Context, db *pgx.Conn, chainID uint64) (chainRecords, error) {
	rs, err := db.Query(ctx, `SELECT m.tx_id::text, m.signer, m.nonce, m.state, m.created_at, coalesce(m.tx_hash, ''), coalesce(m.block_number, 0),
		(SELECT count(*) FROM tx_completions c WHERE c.tx_id = m.tx_id AND c.chain_id = m.chain_id), m.unclaimed_until IS NOT NULL
		FROM managed_tx m WHERE m.chain_id = $1`, chainID)
	if err != nil {
		return chainRecords{}, fmt.Errorf("managed txs: %w", err)
	}
	txs, err := pgx.CollectRows(rs, func(row pgx.CollectableRow) (managedTx, error) {
		var tx managedTx
		err := row.Scan(&tx.id, &tx.signer, &tx.nonce, &tx.state, &tx.createdAt, &tx.txHash, &tx.block, &tx.completions, &tx.heldForAdopter)
		return tx, err
	})
	if err != nil {
		return chainRecords{}, fmt.Errorf("managed txs: %w", err)
	}
	rs, err = db.Query(ctx, "SELECT tx_id::text, signer, nonce FROM tx_attempt WHERE chain_id = $1", chainID)
	if err != nil {
		return chainRecords{}, fmt.Errorf("attempts: %w", err)
	}
	attempts, err := pgx.CollectRows(rs, func(row pgx.CollectableRow) (attempt, error) {
		var a attempt
		err := row.Scan(&a.txID, &a.signer, &a.nonce)
		return a, err
	})
	if err != nil {
		return chainRecords{}, fmt.Errorf("attempts: %w", err)
	}
	return chainRecords{txs: txs, attempts: attempts}, nil
}

// checkChainState compares a chain with the database's rows of it: each signer's nonce on
// the chain equals its managed transactions there, and every confirmed one is on the chain
// with its recorded hash, sender, nonce and block.
func checkChainState(ctx context.Context, ch checkedChain, rec chainRecords, signers []common.Address) ([]row, error) {
	chainNonces := make(map[common.Address]uint64, len(signers))
	for _, s := range signers {
		nonce, err := ch.eth.NonceAt(ctx, s, nil)
		if err != nil {
			return nil, fmt.Errorf("nonce of %s: %w", s, err)
		}
		chainNonces[s] = nonce
	}
	problems, err := confirmedNotOnChain(ctx, ch, confirmedOnRecord(rec.txs))
	if err != nil {
		return nil, err
	}
	return []row{
		{"signers whose chain nonce != managed txs", signersOffRecord(chainNonces, rec.txs), "0"},
		{"confirmed txs not on chain as recorded", problems, "0"},
	}, nil
}

// countOf runs a query that answers one count.
func countOf(ctx context.Context, db *pgx.Conn, sql string, args ...any) (int, error) {
	var n int
	err := db.QueryRow(ctx, sql, args...).Scan(&n)
	return n, err
}

// confirmedNotOnChain counts the confirmed transactions the chain does not hold as
// recorded (hash, sender, nonce, block) and prints the first few.
func confirmedNotOnChain(ctx context.Context, ch checkedChain, expected []e2e.ExpectedTx) (int, error) {
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
