package main

import (
	"context"
	"fmt"
	"maps"
	"math/big"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/bionicotaku/lingo-utils/pglocal"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/jackc/pgx/v5"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/test/e2e"
)

// Database fault kinds of the db scenario, in the order they are injected.
const (
	dbFaultPlanned     = "planned"      // the monitor switches the primary over
	dbFaultKill        = "kill"         // the primary dies (keeper and postmaster SIGKILLed)
	dbFaultKillLagging = "kill-lagging" // the primary dies while the standby has fallen behind
	// the primary dies after the standby fell far behind: with asynchronous replication
	// thousands of nonces per signer are lost, more than one recovery step records
	dbFaultKillDeepLag = "kill-deep-lag"
)

// standbyLag is how long the standby's replication is paused before a fault kills the
// primary.
func standbyLag(kind string) time.Duration {
	switch kind {
	case dbFaultKillLagging:
		return 3 * time.Second
	case dbFaultKillDeepLag:
		return 40 * time.Second
	}
	return 0
}

// replicationMode names the replication a db run uses.
func replicationMode(async bool) string {
	if async {
		return "asynchronous"
	}
	return "synchronous"
}

// runDBScenario is make chaos-db: a pg_auto_failover formation (monitor, primary, standby)
// started from the installed packages, the service nodes on its multi-host DSN, load from
// many clients, and failovers under that load. Synchronous replication must lose nothing;
// asynchronous replication may lose acknowledged commits, and then the service must not pay
// twice, must not leave a transaction stuck, must record every transaction the chain holds
// at a nonce the database lost, must serve every signer again without a person, and must
// answer each lost request's retry with its transaction on chain when it reached the chain.
func runDBScenario(ctx context.Context, o options, root, serviceBin, chainBin string) ([]row, error) {
	fmt.Printf("txm-chaos: db failover, seed %d, %s replication, faults %s, %d nodes, %d signers, %d clients\n",
		o.seed, replicationMode(o.async), strings.Join(o.dbFaults, ", "), o.nodes, o.signers, o.clients)
	// A kept run folder may hold an earlier run's formation.
	if err := os.RemoveAll(filepath.Join(root, "pg")); err != nil {
		return nil, err
	}
	formation, err := e2e.StartFailoverCluster(ctx, e2e.FailoverOptions{Dir: filepath.Join(root, "pg"), Asynchronous: o.async})
	if err != nil {
		return nil, fmt.Errorf("pg_auto_failover: %w", err)
	}
	defer formation.Stop()
	if err := pglocal.CreateDatabase(ctx, formation.DSN("postgres"), "txm", "template1"); err != nil {
		return nil, fmt.Errorf("create database txm: %w", err)
	}
	dsn := formation.DSN("txm")
	fmt.Printf("  formation up: %s\n", dsn)

	devChain, err := e2e.StartDevChain(ctx, e2e.DevChainOptions{Bin: chainBin, BlockInterval: 500 * time.Millisecond, Accounts: o.signers, Dir: filepath.Join(root, "chain")})
	if err != nil {
		return nil, err
	}
	defer func() { _ = devChain.Stop() }()
	keys, err := chain.DevKeys(o.signers)
	if err != nil {
		return nil, err
	}
	c, err := startCluster(ctx, clusterOptions{
		bin: serviceBin, dir: filepath.Join(root, "nodes"), dsn: dsn, chains: []e2e.ChainTarget{{RPCURL: devChain.URL()}}, signers: keys, count: o.nodes,
		// The pool keeps its default size (database.maxConns 0: by the node's cores), as a
		// deployment's would.
		direct: true,
	})
	if err != nil {
		return nil, err
	}
	defer c.stop()

	signers := e2e.Addresses(keys)
	rec := newLoadRecord()
	stopLoad := make(chan struct{})
	faultsDone := make(chan []faultEvent, 1)
	go func() {
		defer close(stopLoad)
		faultsDone <- injectDBFaults(ctx, formation, o.dbFaults)
	}()
	runLoad(ctx, loadOptions{targets: c.clients(), signers: signers, clients: o.clients, seed: o.seed, stop: stopLoad, tagData: true, gasLimit: 30_000}, rec)
	loadEnded := time.Now()
	events := <-faultsDone
	for _, ev := range events {
		fmt.Printf("  fault at %6s  %-14s %-7s %s\n", ev.at, ev.kind, ev.node, ev.note)
	}
	if len(events) != len(o.dbFaults) {
		return nil, fmt.Errorf("%d of %d faults injected", len(events), len(o.dbFaults))
	}
	unhealed := 0
	for _, ev := range events {
		if ev.failed {
			unhealed++
		}
	}
	replays := replayAroundFaults(ctx, c.clients(), rec, events, o.seed)

	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	settleStarted := time.Now()
	open, err := waitFinal(ctx, conn, 3*time.Minute)
	if err != nil {
		return nil, err
	}
	fmt.Printf("  after the faults, %d transactions still open after %s of settling\n", open, time.Since(settleStarted).Round(time.Second))
	// Clients retry what they lost: every acknowledged create with a requestId whose
	// transaction the database no longer has is sent again as it was.
	retries, err := retryLostRequests(ctx, c.clients(), conn, rec, o.seed)
	if err != nil {
		return nil, err
	}
	if retries.sent > 0 {
		fmt.Printf("  retried %d lost requests: %d answered with their transaction on chain, %d with a new one, %d refused %s\n",
			retries.sent, retries.adopted, retries.fresh, retries.refused, strings.TrimPrefix(fmt.Sprint(retries.refusedBy), "map"))
		if open, err = waitFinal(ctx, conn, 3*time.Minute); err != nil {
			return nil, err
		}
	}
	rows, err := checkDBRun(ctx, dbCheck{
		db: conn, chainURL: devChain.URL(), api: c.client(c.nodes[0]), rec: rec, signers: signers,
		open: open, async: o.async, replays: replays, retries: retries, events: events, loadEnded: loadEnded,
	})
	if err != nil {
		return nil, err
	}
	rows = append(rows, row{"faults whose formation did not heal", unhealed, "0"})
	rec.mu.Lock()
	fmt.Printf("  answers that were not an acknowledgement (retried or final): %s\n", strings.TrimPrefix(fmt.Sprint(rec.errorsSeen), "map"))
	rec.mu.Unlock()
	return rows, nil
}

// injectDBFaults waits for the load to warm up, then injects each fault in turn; after each
// one the formation is healed (a killed node restarted and rejoined as the standby) and the
// load runs on for a while before the next.
func injectDBFaults(ctx context.Context, f *e2e.FailoverCluster, kinds []string) []faultEvent {
	start := time.Now()
	var events []faultEvent
	sleep(ctx, 8*time.Second)
	for _, kind := range kinds {
		if ctx.Err() != nil {
			break
		}
		ev, err := injectDBFault(ctx, f, kind, start)
		if err != nil {
			ev.note, ev.failed = "ERROR "+err.Error(), true
			events = append(events, ev)
			break
		}
		events = append(events, ev)
		sleep(ctx, 8*time.Second)
	}
	return events
}

// dbHealWait bounds how long the formation may take to heal after a failover. A node that
// rejoins may need a full base backup and then catch up under the load: 2.5-4 minutes on two
// busy cores, and after the deep-lag fault (40 s of WAL behind) more than 5 minutes once,
// with other builds on the machine.
const dbHealWait = 8 * time.Minute

func injectDBFault(ctx context.Context, f *e2e.FailoverCluster, kind string, start time.Time) (faultEvent, error) {
	ev := faultEvent{kind: kind, at: time.Since(start).Round(100 * time.Millisecond), when: time.Now()}
	primary, err := f.Primary(ctx)
	if err != nil {
		return ev, err
	}
	ev.node = primary.Name
	switch kind {
	case dbFaultPlanned:
		if err := f.PlannedFailover(ctx); err != nil {
			return ev, err
		}
		if err := f.WaitForNewPrimary(ctx, primary, 3*time.Minute); err != nil {
			return ev, err
		}
		ev.promoted = time.Now()
	case dbFaultKill, dbFaultKillLagging, dbFaultKillDeepLag:
		var drop func() error
		if lag := standbyLag(kind); lag > 0 {
			standby, err := f.Standby(ctx)
			if err != nil {
				return ev, err
			}
			var resume func() error
			if drop, resume, err = f.PauseReplication(ctx, standby); err != nil {
				return ev, err
			}
			defer func() { _ = resume() }()
			ev.began = time.Now()
			sleep(ctx, lag)
			ev.when = time.Now()
			ev.at = time.Since(start).Round(100 * time.Millisecond)
		}
		if err := f.Kill(primary); err != nil {
			return ev, err
		}
		if drop != nil {
			// What the frozen receiver holds never reaches the standby's disk.
			if err := drop(); err != nil {
				return ev, fmt.Errorf("drop the paused WAL receiver: %w", err)
			}
		}
		if err := f.WaitForNewPrimary(ctx, primary, 3*time.Minute); err != nil {
			return ev, err
		}
		ev.promoted = time.Now()
		if err := f.Restart(primary); err != nil {
			return ev, err
		}
	default:
		return ev, fmt.Errorf("unknown database fault %q", kind)
	}
	ev.note = fmt.Sprintf("promoted after %s", time.Since(ev.when).Round(100*time.Millisecond))
	if err := f.WaitHealthy(ctx, dbHealWait); err != nil {
		return ev, err
	}
	ev.note += fmt.Sprintf(", formation healthy after %s", time.Since(ev.when).Round(100*time.Millisecond))
	return ev, nil
}

// replayOutcome counts how the replays of acknowledged requests were answered.
type replayOutcome struct {
	sent, same, other, refused int
	refusedBy                  map[string]int
}

// replayAroundFaults sends again, with its requestId, every create acknowledged in the
// seconds before a fault: a client that never saw the answer would. The service must
// answer with the original transaction, or (if the database lost it) with a transaction
// that cannot execute the request a second time.
func replayAroundFaults(ctx context.Context, clients []*e2e.Client, rec *loadRecord, events []faultEvent, seed uint64) replayOutcome {
	out := replayOutcome{refusedBy: map[string]int{}}
	rec.mu.Lock()
	var picked []ackedRequest
	for _, ev := range events {
		for _, k := range rec.keyed {
			if k.at.Before(ev.when) && k.at.After(ev.start().Add(-3*time.Second)) {
				picked = append(picked, k)
			}
		}
	}
	rec.mu.Unlock()
	r := rand.New(rand.NewPCG(seed, 99))
	for _, k := range picked {
		out.sent++
		var (
			gotID string
			err   error
		)
		for try := range 5 {
			got, e := clients[r.IntN(len(clients))].CreateTx(ctx, k.req)
			err = e
			if e == nil {
				gotID = got.GetTx().GetTxId()
				break
			}
			if reason := reasonOf(e); !strings.HasPrefix(reason, "503") && !strings.HasPrefix(reason, "transport") {
				break
			}
			sleep(ctx, time.Duration(try+1)*300*time.Millisecond)
		}
		switch {
		case err != nil:
			out.refused++
			out.refusedBy[reasonOf(err)]++
		case gotID == k.txID:
			out.same++
		default:
			out.other++
		}
	}
	return out
}

type dbCheck struct {
	db       *pgx.Conn
	chainURL string
	api      *e2e.Client
	rec      *loadRecord
	signers  []common.Address
	open     int
	async    bool
	replays  replayOutcome
	retries  retryOutcome
	events   []faultEvent
	// loadEnded bounds a stretch without acknowledgements that never ended.
	loadEnded time.Time
}

// chainTx is one transaction of a managed signer as the chain holds it.
type chainTx struct {
	signer common.Address
	nonce  uint64
	hash   common.Hash
	data   string
}

// retryLostRequests sends again, as it was, every acknowledged create with a requestId
// whose transaction the database no longer has (lost with the commits a failover dropped),
// once the service has settled: each must be answered, with its transaction recovered from
// the chain when it reached the chain, with a new one when it never did.
func retryLostRequests(ctx context.Context, clients []*e2e.Client, db *pgx.Conn, rec *loadRecord, seed uint64) (retryOutcome, error) {
	out := retryOutcome{refusedBy: map[string]int{}}
	rec.mu.Lock()
	keyed := slices.Clone(rec.keyed)
	rec.mu.Unlock()
	ids := make([]string, len(keyed))
	for i, k := range keyed {
		ids[i] = k.txID
	}
	rs, err := db.Query(ctx, "SELECT tx_id::text FROM managed_tx WHERE tx_id = ANY($1::uuid[])", ids)
	if err != nil {
		return out, err
	}
	kept, err := pgx.CollectRows(rs, pgx.RowTo[string])
	if err != nil {
		return out, err
	}
	r := rand.New(rand.NewPCG(seed, 101))
	for _, k := range keyed {
		if slices.Contains(kept, k.txID) {
			continue
		}
		out.sent++
		var (
			resp *v1.CreateTxResponse
			err  error
		)
		// A signer still being reconciled answers 503: a client retries.
		for try := 0; try < 60; try++ {
			if resp, err = clients[r.IntN(len(clients))].CreateTx(ctx, k.req); err == nil {
				break
			}
			if reason := reasonOf(err); !strings.HasPrefix(reason, "503") && !strings.HasPrefix(reason, "transport") {
				break
			}
			sleep(ctx, 500*time.Millisecond)
		}
		if err != nil {
			out.refused++
			out.refusedBy[reasonOf(err)]++
			continue
		}
		var recovered bool
		if err := db.QueryRow(ctx, "SELECT recovered_at IS NOT NULL FROM managed_tx WHERE tx_id = $1::uuid", resp.GetTx().GetTxId()).Scan(&recovered); err != nil {
			return out, fmt.Errorf("the answer to a retried request names tx %s: %w", resp.GetTx().GetTxId(), err)
		}
		if recovered {
			out.adopted++
		} else {
			out.fresh++
		}
	}
	return out, nil
}

// checkDBRun is the checker of make chaos-db. Synchronous replication must lose nothing,
// so every row there wants 0; under asynchronous replication the losses are reported and
// what the service must still guarantee is checked.
func checkDBRun(ctx context.Context, c dbCheck) ([]row, error) {
	var rows []row
	strict := func(want string) string {
		if c.async {
			return ""
		}
		return want
	}

	ch, err := dialChain(ctx, e2e.ChainTarget{RPCURL: c.chainURL})
	if err != nil {
		return nil, err
	}
	defer ch.eth.Close()
	records, err := readChainRecords(ctx, c.db, ch.id)
	if err != nil {
		return nil, err
	}

	c.rec.mu.Lock()
	attempted, acked := c.rec.attempted, len(c.rec.acknowledged)
	ackedAt := maps.Clone(c.rec.acknowledged)
	givenTwice := noncesGivenTwice(c.rec.nonceHolders)
	for _, key := range givenTwice[:min(3, len(givenTwice))] {
		var when []string
		for _, id := range c.rec.nonceHolders[key] {
			when = append(when, fmt.Sprintf("%s acked %s", id, ackedAt[id].Format("15:04:05.000")))
		}
		fmt.Printf("  nonce %s given to %s\n", key, strings.Join(when, " and "))
	}
	failed := fmt.Sprint(c.rec.failed)
	c.rec.mu.Unlock()
	// When each create was first acknowledged, in order, for the outages and timelines.
	ackTimes := slices.SortedFunc(maps.Values(ackedAt), time.Time.Compare)
	lostIDs := lostAcknowledged(slices.Sorted(maps.Keys(ackedAt)), records.txs)
	rows = append(rows,
		row{"creates attempted", attempted, ""},
		row{"creates acknowledged (txId returned)", acked, "> 0"},
		row{"acknowledged creates lost", len(lostIDs), strict("0")},
	)
	c.rec.mu.Lock()
	ackSigner := maps.Clone(c.rec.ackSigner)
	c.rec.mu.Unlock()
	fewestBySigner, mostBySigner := lostBySigner(lostIDs, ackedAt, ackSigner, c.events)
	for i, n := range lostByFault(lostIDs, ackedAt, c.events) {
		rows = append(rows,
			row{"  lost in " + c.events[i].kind, n, strict("0")},
			row{"    fewest lost by one signer", fewestBySigner[i], strict("0")},
			row{"    most lost by one signer", mostBySigner[i], strict("0")})
	}
	rows = append(rows,
		row{"nonces given to two acknowledged txs", len(givenTwice), strict("0")},
		row{"duplicate nonces in the database", duplicateNonces(records.txs), "0"},
		row{"replays of acked requests near a fault", c.replays.sent, "> 0"},
		row{"  answered with the original tx", c.replays.same, ""},
		row{"  answered with another tx", c.replays.other, strict("0")},
		row{"  refused", c.replays.refused, ""},
	)
	if c.replays.refused > 0 {
		fmt.Printf("  replays refused, by reason: %s\n", strings.TrimPrefix(fmt.Sprint(c.replays.refusedBy), "map"))
	}

	onChain, err := readSignerTxs(ctx, ch.eth, c.signers)
	if err != nil {
		return nil, err
	}
	known, err := knownHashes(ctx, c.db)
	if err != nil {
		return nil, err
	}
	unknown := unknownToDatabase(onChain, known)
	rows = append(rows,
		row{"lost requests retried after recovery (with their requestId)", c.retries.sent, ""},
		row{"  answered with their transaction on chain (adopted)", c.retries.adopted, ""},
		row{"  given a new transaction (never reached the chain)", c.retries.fresh, ""},
		row{"  refused", c.retries.refused, "0"},
		row{"requests executed twice on chain", executedTwice(onChain), "0"},
		// Recovery records every transaction the chain holds at a lost nonce.
		row{"chain txs unknown to the database", len(unknown), "0"},
	)
	recovered, err := countOf(ctx, c.db, "SELECT count(*) FROM managed_tx WHERE recovered_at IS NOT NULL")
	if err != nil {
		return nil, err
	}
	adoptedRows, err := countOf(ctx, c.db, "SELECT count(*) FROM managed_tx WHERE recovered_at IS NOT NULL AND request_id IS NOT NULL")
	if err != nil {
		return nil, err
	}
	releasedByRecovery, err := countOf(ctx, c.db, "SELECT count(*) FROM signer_quarantine WHERE released_by LIKE 'recovery%'")
	if err != nil {
		return nil, err
	}
	rows = append(rows,
		row{"transactions recovered from the chain", recovered, strict("0")},
		row{"  adopted by a retried create", adoptedRows, strict("0")},
		row{"  unclaimed (lost without a requestId)", recovered - adoptedRows, strict("0")},
		row{"signers released by the recovery (no person)", releasedByRecovery, strict("0")},
	)
	if n := len(c.events); n > 0 {
		last := c.events[n-1]
		// From the new primary's promotion: answers that arrived just after the kill were
		// committed before it.
		failover := last.promoted
		if failover.IsZero() {
			failover = last.when
		}
		longest, never := servingAgain(ackSigner, ackedAt, c.signers, failover)
		rows = append(rows,
			row{"signers not serving again after " + last.kind, never, "0"},
			row{"  longest from the promotion to a signer's first create served (ms)", int(longest.Milliseconds()), ""},
		)
	}

	// No signer is left quarantined, and while one is the admin listing shows what the
	// chain holds at each unknown nonce.
	answers := make(map[common.Address]*v1.Quarantine, len(c.signers))
	for _, s := range c.signers {
		q, err := c.api.GetQuarantine(ctx, s.Hex())
		if err != nil {
			return nil, fmt.Errorf("quarantine of %s: %w", s.Hex(), err)
		}
		answers[s] = q
		if q.GetQuarantined() {
			fmt.Printf("  quarantined %s: database knew nonces below %d, chain at %d, %d unknown nonces listed\n",
				s.Hex(), q.GetDbNextNonce(), q.GetChainNonce(), len(q.GetUnknownNonces()))
		}
	}
	qc := countQuarantines(answers, unknown)
	rows = append(rows,
		row{"signers still quarantined", qc.quarantined, "0"},
		row{"unknown chain txs missing from the admin listing", qc.unlisted, "0"},
	)

	stuck, err := countOf(ctx, c.db, "SELECT count(*) FROM managed_tx WHERE state IN ('TRACKING', 'STUCK') AND sub_state = 'NONCE_TAKEN'")
	if err != nil {
		return nil, err
	}
	rows = append(rows, row{"stuck as NONCE_TAKEN", stuck, "0"})
	// A transaction the database lost the attempt of, whose own intent the chain holds,
	// must be recognised, not failed as "nonce taken".
	rs, err := c.db.Query(ctx, "SELECT signer, nonce, coalesce(payload->>'data', '0x') FROM managed_tx WHERE state = 'FAILED_FINAL' AND sub_state = 'NONCE_TAKEN'")
	if err != nil {
		return nil, err
	}
	failedTaken, err := pgx.CollectRows(rs, func(row pgx.CollectableRow) (chainTx, error) {
		var tx chainTx
		var signer string
		err := row.Scan(&signer, &tx.nonce, &tx.data)
		tx.signer = common.HexToAddress(signer)
		return tx, err
	})
	if err != nil {
		return nil, err
	}
	rows = append(rows, row{"failed as NONCE_TAKEN by their own tx", failedByOwnTx(failedTaken, onChain), "0"})

	rows = append(rows, row{"transactions not final", c.open, "0"}, row{"transactions final", finalCount(records.txs), "> 0"})
	rows = append(rows,
		row{"final without a completion / completion twice", finalWithoutOneCompletion(records.txs), "0"},
		row{"  final, completion held for the create that adopts it", heldForAdopters(records.txs), ""},
	)
	mismatch, err := confirmedNotOnChain(ctx, ch, confirmedOnRecord(records.txs))
	if err != nil {
		return nil, err
	}
	rows = append(rows, row{"confirmed txs not on chain as recorded", mismatch, "0"})

	for i, ev := range c.events {
		until := c.loadEnded
		if i+1 < len(c.events) {
			until = c.events[i+1].start()
		}
		rows = append(rows, row{fmt.Sprintf("outage after %s (s, no create acknowledged)", ev.kind), outageSeconds(ackTimes, ev.start(), until), ""})
		fmt.Printf("  creates acknowledged per second around %s (from 5 s before it began): %s\n", ev.kind, ackTimeline(ackTimes, ev.start().Add(-5*time.Second), 45))
	}
	fmt.Printf("  creates never acknowledged, by last answer: %s\n", failed)
	return rows, nil
}

// outageSeconds is the longest stretch without an acknowledged create that began around
// the fault (from 2 s before it until the next fault), rounded up: answers to creates that
// committed just before the fault still arrive after it, so the first answer after the
// fault says nothing. A stretch that never ended (no create acknowledged after it, as
// when every signer is quarantined) counts until the end of the window.
func outageSeconds(sorted []time.Time, fault, until time.Time) int {
	longest := time.Duration(0)
	for i := 1; i < len(sorted); i++ {
		start := sorted[i-1]
		if start.Before(fault.Add(-2*time.Second)) || start.After(until) {
			continue
		}
		end := sorted[i]
		if end.After(until) {
			end = until // the next fault's outage is its own
		}
		longest = max(longest, end.Sub(start))
	}
	// Acknowledgements may stop for good (every signer quarantined): then the stretch lasts
	// from the last one until the window ends.
	if last := windowLast(sorted, until); !last.IsZero() && last.After(fault.Add(-2*time.Second)) {
		longest = max(longest, until.Sub(last))
	}
	return int((longest + time.Second - 1) / time.Second)
}

// windowLast is the latest acknowledgement before until (zero: none).
func windowLast(sorted []time.Time, until time.Time) time.Time {
	i, _ := slices.BinarySearchFunc(sorted, until, time.Time.Compare)
	if i == 0 {
		return time.Time{}
	}
	return sorted[i-1]
}

// ackTimeline is the number of creates acknowledged in each of the seconds from from on.
func ackTimeline(ackTimes []time.Time, from time.Time, seconds int) string {
	counts := make([]int, seconds)
	for _, t := range ackTimes {
		if i := int(t.Sub(from) / time.Second); t.After(from) && i < seconds {
			counts[i]++
		}
	}
	parts := make([]string, seconds)
	for i, n := range counts {
		parts[i] = fmt.Sprint(n)
	}
	return strings.Join(parts, " ")
}

// readSignerTxs reads every transaction the managed signers have on chain, block by block.
func readSignerTxs(ctx context.Context, eth *ethclient.Client, signers []common.Address) ([]chainTx, error) {
	chainID, err := eth.ChainID(ctx)
	if err != nil {
		return nil, err
	}
	head, err := eth.BlockNumber(ctx)
	if err != nil {
		return nil, err
	}
	ours := map[common.Address]bool{}
	for _, s := range signers {
		ours[s] = true
	}
	signer := types.LatestSignerForChainID(chainID)
	var out []chainTx
	for n := uint64(0); n <= head; n++ {
		block, err := eth.BlockByNumber(ctx, new(big.Int).SetUint64(n))
		if err != nil {
			return nil, fmt.Errorf("block %d: %w", n, err)
		}
		for _, tx := range block.Transactions() {
			from, err := types.Sender(signer, tx)
			if err != nil || !ours[from] {
				continue
			}
			out = append(out, chainTx{signer: from, nonce: tx.Nonce(), hash: tx.Hash(), data: hexutil.Encode(tx.Data())})
		}
	}
	return out, nil
}

// knownHashes is every transaction hash the database holds an attempt or a final hash for.
func knownHashes(ctx context.Context, db *pgx.Conn) (map[common.Hash]bool, error) {
	rs, err := db.Query(ctx, "SELECT tx_hash FROM tx_attempt UNION SELECT tx_hash FROM managed_tx WHERE tx_hash IS NOT NULL")
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	out := map[common.Hash]bool{}
	for rs.Next() {
		var h string
		if err := rs.Scan(&h); err != nil {
			return nil, err
		}
		out[common.HexToHash(h)] = true
	}
	return out, rs.Err()
}
