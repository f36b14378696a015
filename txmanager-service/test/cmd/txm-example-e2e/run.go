package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/jackc/pgx/v5"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/test/e2e"
)

// env is what the run started; cleanups stop it in reverse.
type env struct {
	dir                          string
	payoutsBin, payoutsConf      string
	payoutsLog                   string
	payoutsEnv                   []string
	mu                           sync.Mutex
	payouts                      *e2e.Process
	cleanups                     []func()
	payoutsDSN, txmDSN, chainURL string
	signer                       common.Address
	kills                        map[string]int
	unsentAtKill, awaitingAtKill int
	txmOpenAtKill                int
}

func (e *env) defer_(f func()) { e.cleanups = append(e.cleanups, f) }

func (e *env) close() {
	for i := len(e.cleanups) - 1; i >= 0; i-- {
		e.cleanups[i]()
	}
}

func (e *env) payoutsURL() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return "http://" + e.payouts.Announced()
}

func run(ctx context.Context, o options) ([]row, error) {
	repo, err := e2e.FindRepo(o.repo, filepath.Join("txmanager-service", "go.mod"), filepath.Join("examples", "payouts", "go.mod"))
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "txm-example-e2e-")
	if err != nil {
		return nil, err
	}
	e := &env{dir: dir, kills: map[string]int{}}
	defer e.close()
	if o.keep {
		fmt.Printf("work folder (kept): %s\n", dir)
	} else {
		e.defer_(func() { _ = os.RemoveAll(dir) })
	}
	binDir := filepath.Join(dir, "bin")
	step("building txmanager-service, txm-devchain and the payouts example")
	module := filepath.Join(repo, "txmanager-service")
	serviceBin, err := e2e.BuildService(ctx, module, binDir)
	if err != nil {
		return nil, err
	}
	chainBin, err := e2e.BuildDevChain(ctx, module, binDir)
	if err != nil {
		return nil, err
	}
	e.payoutsBin = filepath.Join(binDir, "payouts")
	build := exec.CommandContext(ctx, "go", "build", "-o", e.payoutsBin, "./cmd/payouts")
	build.Dir = filepath.Join(repo, "examples", "payouts")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build payouts: %w\n%s", err, out)
	}

	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	step("PostgreSQL, txm-devchain (500ms blocks), txmanager-service")
	pg, err := e2e.FindPostgres(ctx)
	if err != nil {
		return nil, err
	}
	e.defer_(func() { _ = pg.Close() })
	var dbs []*e2e.Database
	for _, prefix := range []string{"txm_example", "payouts_example"} {
		db, err := pg.CreateDatabase(ctx, prefix)
		if err != nil {
			return nil, err
		}
		dbs = append(dbs, db)
		e.defer_(func() {
			dropCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_ = db.Drop(dropCtx)
		})
	}
	e.txmDSN, e.payoutsDSN = dbs[0].DSN, dbs[1].DSN
	devChain, err := e2e.StartDevChain(ctx, e2e.DevChainOptions{Bin: chainBin, BlockInterval: 500 * time.Millisecond, Accounts: 1, Dir: filepath.Join(dir, "chain")})
	if err != nil {
		return nil, err
	}
	e.defer_(func() { _ = devChain.Stop() })
	e.chainURL = devChain.URL()
	keys, err := chain.DevKeys(1)
	if err != nil {
		return nil, err
	}
	e.signer = e2e.Address(keys[0])
	svcConfig := e2e.FastLoops(e2e.ServiceConfig{NodeID: "txm-example-e2e", DatabaseDSN: e.txmDSN, ChainRPCURL: e.chainURL, Signers: keys})
	svcOpts := e2e.ServiceOptions{Bin: serviceBin, Config: svcConfig, Dir: filepath.Join(dir, "txmanager")}
	svc, err := e2e.StartService(ctx, svcOpts)
	if err != nil {
		return nil, err
	}
	var svcMu sync.Mutex
	e.defer_(func() {
		svcMu.Lock()
		defer svcMu.Unlock()
		_ = svc.Stop()
	})
	proxy, err := e2e.NewForwarder(svc.GRPCAddr())
	if err != nil {
		return nil, err
	}
	e.defer_(proxy.Close)

	step("payouts example (signer %s, txmanager through %s)", e.signer.Hex(), proxy.Addr())
	if e.payoutsConf, err = writePayoutsConfig(dir); err != nil {
		return nil, err
	}
	e.payoutsLog = filepath.Join(dir, "payouts.log")
	e.payoutsEnv = append(os.Environ(), "DATABASE_URL="+e.payoutsDSN, "TXMANAGER_ADDR="+proxy.Addr(), "PAYOUTS_SIGNER="+e.signer.Hex())
	if e.payouts, err = startPayouts(ctx, e.payoutsBin, e.payoutsConf, e.payoutsLog, e.payoutsEnv); err != nil {
		return nil, err
	}
	e.defer_(func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		_ = e.payouts.Stop(20 * time.Second)
	})
	db, err := pgx.Connect(ctx, e.payoutsDSN)
	if err != nil {
		return nil, err
	}
	defer db.Close(context.WithoutCancel(ctx))

	step("creating %d payouts at %d/s; faults: kill the example mid-relay and mid-consume, kill txmanager", o.payouts, o.rate)
	created := make([]string, o.payouts) // payout id per Idempotency-Key index
	var createErr error
	var creating sync.WaitGroup
	var done atomic.Int64
	creating.Go(func() { createErr = createAll(ctx, e, o, created, &done) })

	// Fault 1: the relay holds a claimed batch open while its creates are in flight (its
	// transaction sits idle after the FOR UPDATE SKIP LOCKED claim): the example dies
	// between sending and recording, the window the requestId has to make harmless.
	if err := e.waitFor(ctx, db, "relay in flight", `SELECT
		(SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state = 'idle in transaction'
		   AND query LIKE '%FOR UPDATE OF o SKIP LOCKED%'),
		(SELECT count(*) FROM payout_outbox WHERE sent_at IS NULL)`,
		func(claims, unsent int) bool { return claims > 0 && unsent > 0 }, func(_, unsent int) { e.unsentAtKill = unsent }); err != nil {
		return nil, err
	}
	if err := e.restartPayouts(ctx, "mid-relay"); err != nil {
		return nil, err
	}
	// Fault 2: completions are being applied (some payouts final, some awaiting theirs).
	if err := e.waitFor(ctx, db, "consumer in flight", `SELECT count(*) FILTER (WHERE status = 'SUBMITTED'), count(*) FILTER (WHERE status IN ('PAID','FAILED')) FROM payouts`,
		func(a, b int) bool { return a > 0 && b >= 20 && int64(b) > int64(o.payouts)/5 }, func(a, _ int) { e.awaitingAtKill = a }); err != nil {
		return nil, err
	}
	if err := e.restartPayouts(ctx, "mid-consume"); err != nil {
		return nil, err
	}
	// Fault 3: txmanager dies with transactions still open, and comes back on its database.
	if err := e.waitFor(ctx, db, "payouts awaiting txmanager", `SELECT count(*) FILTER (WHERE status IN ('PENDING','SUBMITTED')), 0 FROM payouts`,
		func(a, _ int) bool { return a >= 10 }, func(a, _ int) { e.txmOpenAtKill = a }); err != nil {
		return nil, err
	}
	fmt.Printf("    SIGKILL txmanager-service (%d payouts unfinished)\n", e.txmOpenAtKill)
	svcMu.Lock()
	svc.Kill()
	e.kills["txmanager"]++
	time.Sleep(time.Second)
	svc, err = e2e.StartService(ctx, e2e.ServiceOptions{Bin: serviceBin, Config: svc.Config(), Dir: svcOpts.Dir})
	svcMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("restart txmanager: %w", err)
	}
	proxy.SetTarget(svc.GRPCAddr())

	creating.Wait()
	if createErr != nil {
		return nil, createErr
	}
	step("waiting until every payout is final")
	if err := e.waitFor(ctx, db, "every payout final", `SELECT count(*) FILTER (WHERE status IN ('PAID','FAILED')), count(*) FROM payouts`,
		func(final, all int) bool { return final == all && all >= o.payouts }, nil); err != nil {
		return nil, err
	}
	e.mu.Lock()
	_ = e.payouts.Stop(20 * time.Second)
	e.mu.Unlock()
	step("checking the payouts against txmanager and the chain")
	return e.check(ctx, db, created, svc.HTTPURL())
}

// waitFor polls query (two counts) until accept holds; then record sees the counts.
func (e *env) waitFor(ctx context.Context, db *pgx.Conn, what, query string, accept func(a, b int) bool, record func(a, b int)) error {
	for {
		var a, b int
		if err := db.QueryRow(ctx, query).Scan(&a, &b); err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if accept(a, b) {
			if record != nil {
				record(a, b)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s (last %d, %d): %w; payouts log tail:\n%s", what, a, b, ctx.Err(), e.payouts.LogTail(25))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// restartPayouts SIGKILLs the example and starts it again on the same database.
func (e *env) restartPayouts(ctx context.Context, why string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	fmt.Printf("    SIGKILL payouts (%s)\n", why)
	e.payouts.Kill()
	e.kills[why]++
	p, err := startPayouts(ctx, e.payoutsBin, e.payoutsConf, e.payoutsLog, e.payoutsEnv)
	if err != nil {
		return fmt.Errorf("restart payouts after %s: %w", why, err)
	}
	e.payouts = p
	return nil
}

// createAll posts every payout with an Idempotency-Key, at the configured rate, retrying
// each until the example acknowledges it: a create whose answer was lost in a kill is
// retried with the same key and returns the payout it made.
func createAll(ctx context.Context, e *env, o options, created []string, done *atomic.Int64) error {
	client := &http.Client{Timeout: 10 * time.Second}
	next := make(chan int)
	errs := make(chan error, o.parallel)
	var wg sync.WaitGroup
	for range o.parallel {
		wg.Go(func() {
			for i := range next {
				id, err := createOne(ctx, client, e, i)
				if err != nil {
					errs <- err
					return
				}
				created[i] = id
				done.Add(1)
			}
		})
	}
	tick := time.NewTicker(time.Second / time.Duration(o.rate))
	defer tick.Stop()
	for i := range created {
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
		select {
		case next <- i:
		case err := <-errs:
			close(next)
			wg.Wait()
			return err
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
	}
	return ctx.Err()
}

func createOne(ctx context.Context, client *http.Client, e *env, i int) (string, error) {
	body := fmt.Sprintf(`{"to":%q,"amount":"%d"}`, recipient(i), 1_000_000_000+i)
	for attempt := 1; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.payoutsURL()+"/v1/payouts", strings.NewReader(body))
		if err != nil {
			return "", err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", fmt.Sprintf("example-e2e-%d", i))
		resp, err := client.Do(req)
		if err == nil {
			var out struct {
				ID string `json:"id"`
			}
			var buf bytes.Buffer
			_, _ = buf.ReadFrom(resp.Body)
			resp.Body.Close()
			switch {
			case resp.StatusCode == http.StatusCreated || resp.StatusCode == http.StatusOK:
				if err := json.Unmarshal(buf.Bytes(), &out); err != nil || out.ID == "" {
					return "", fmt.Errorf("payout %d: answer %q", i, buf.String())
				}
				return out.ID, nil
			case resp.StatusCode != http.StatusServiceUnavailable:
				return "", fmt.Errorf("payout %d: HTTP %d %s", i, resp.StatusCode, buf.String())
			}
		}
		// The example is down (killed) or busy: the same key makes the retry safe.
		if ctx.Err() != nil {
			return "", fmt.Errorf("payout %d: %w", i, errors.Join(err, ctx.Err()))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// recipient spreads payouts over a few addresses nobody holds a key for.
func recipient(i int) string {
	return common.BigToAddress(common.Big1).Hex()[:38] + fmt.Sprintf("%04x", 0x1000+i%16)
}

// check compares the example's database with txmanager's answers and the chain.
func (e *env) check(ctx context.Context, db *pgx.Conn, created []string, txmURL string) ([]row, error) {
	type payout struct{ id, status, txID, txHash, requestID string }
	rows, err := db.Query(ctx, `SELECT p.id::text, p.status, coalesce(p.tx_id, ''), coalesce(p.tx_hash, ''), o.id::text
		FROM payouts p JOIN payout_outbox o ON o.payout_id = p.id`)
	if err != nil {
		return nil, err
	}
	var all []payout
	for rows.Next() {
		var p payout
		if err := rows.Scan(&p.id, &p.status, &p.txID, &p.txHash, &p.requestID); err != nil {
			return nil, err
		}
		all = append(all, p)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	byID := map[string]payout{}
	for _, p := range all {
		byID[p.id] = p
	}
	lost := 0
	for _, id := range created {
		if _, ok := byID[id]; !ok {
			lost++
		}
	}
	var inbox, inboxDup int
	if err := db.QueryRow(ctx, `SELECT count(*), count(*) - count(DISTINCT payout_id) FROM payout_completions`).Scan(&inbox, &inboxDup); err != nil {
		return nil, err
	}

	txmDB, err := pgx.Connect(ctx, e.txmDSN)
	if err != nil {
		return nil, err
	}
	defer txmDB.Close(context.WithoutCancel(ctx))
	var managed, twoTx int
	if err := txmDB.QueryRow(ctx, `SELECT count(*) FROM managed_tx WHERE lower(signer) = lower($1)`, e.signer.Hex()).Scan(&managed); err != nil {
		return nil, err
	}
	// Two transactions for one payout: two managed transactions carrying one payout's
	// requestId, or a payout holding a transaction other than its requestId's.
	if err := txmDB.QueryRow(ctx, `SELECT count(*) FROM (SELECT request_id FROM managed_tx WHERE request_id IS NOT NULL
		GROUP BY request_id HAVING count(*) > 1) d`).Scan(&twoTx); err != nil {
		return nil, err
	}
	client := e2e.NewClient(txmURL)
	var expected []e2e.ExpectedTx
	rightState, hashMismatch := 0, 0
	for _, p := range all {
		tx, err := client.GetTx(ctx, p.txID)
		if err != nil {
			return nil, fmt.Errorf("payout %s: tx %q: %w", p.id, p.txID, err)
		}
		if tx.GetRequestId() != p.requestID {
			twoTx++
		}
		if tx.GetTxHash() != p.txHash {
			hashMismatch++
		}
		want := map[string]string{"CONFIRMED": "PAID", "FAILED_FINAL": "FAILED"}[tx.GetState()]
		if want != "" && want == p.status {
			rightState++
		}
		expected = append(expected, e2e.ExpectedTx{TxID: tx.GetTxId(), Signer: e.signer, Nonce: tx.GetNonce(),
			TxHash: common.HexToHash(tx.GetTxHash()), BlockNumber: tx.GetReceipt().GetBlockNumber()})
	}
	eth, err := ethclient.DialContext(ctx, e.chainURL)
	if err != nil {
		return nil, err
	}
	defer eth.Close()
	nonce, err := eth.NonceAt(ctx, e.signer, nil)
	if err != nil {
		return nil, err
	}
	results, err := e2e.CheckOnChain(ctx, eth, expected, 8)
	if err != nil {
		return nil, err
	}
	minedOK := 0
	for i, r := range results {
		if r == nil {
			minedOK++
		} else if i < 3 {
			fmt.Printf("    on chain: %v\n", r)
		}
	}
	relayReplays := strings.Count(readFile(e.payoutsLog), "outbox row re-sent")
	n := len(created)
	eq := func(name string, got, want int) row { return row{name, got, fmt.Sprint(want), got == want} }
	pos := func(name string, got int) row { return row{name, got, "> 0", got > 0} }
	return []row{
		eq("payouts acknowledged over HTTP", countNonEmpty(created), n),
		eq("payouts in the example's database", len(all), n),
		eq("payouts lost (acknowledged, not in the database)", lost, 0),
		eq("transactions txmanager holds for the signer", managed, n),
		eq("transactions on chain (signer's nonce)", int(nonce), n),
		eq("payouts whose tx hash is mined, from the signer, ok", minedOK, n),
		eq("payouts with two transactions", twoTx, 0),
		eq("payouts whose tx hash differs from txmanager's", hashMismatch, 0),
		eq("payouts in the right final state (CONFIRMED->PAID)", rightState, n),
		eq("completions applied (inbox rows)", inbox, n),
		eq("completions applied twice", inboxDup, 0),
		eq("example killed mid-relay", e.kills["mid-relay"], 1),
		pos("  outbox rows unsent at that kill", e.unsentAtKill),
		{"  re-sends txmanager answered as replays (informational)", relayReplays, ">= 0", true},
		eq("example killed mid-consume", e.kills["mid-consume"], 1),
		pos("  payouts awaiting completion at that kill", e.awaitingAtKill),
		eq("txmanager killed and restarted on its database", e.kills["txmanager"], 1),
		pos("  payouts unfinished at that kill", e.txmOpenAtKill),
	}, nil
}

func countNonEmpty(ids []string) int {
	n := 0
	for _, id := range ids {
		if id != "" {
			n++
		}
	}
	return n
}

func readFile(path string) string {
	data, _ := os.ReadFile(path)
	return string(data)
}
