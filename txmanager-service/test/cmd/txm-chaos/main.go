// Command txm-chaos is the fault-injection suite (make chaos). On loopback, against one
// PostgreSQL and two chains (txm-devchain under ids 1337 and 31337, the same development
// keys funded on both), it runs
//
//   - failover: check 3 of docs/design.md, deterministic, on the first chain: an owner frozen
//     mid-broadcast past its lease is taken over, and comes back fenced;
//
//   - chaos: 3 service processes in forward routing serving both chains, a load generator
//     sending creates for several signers on either chain to random nodes (some idempotent,
//     some retried and replayed), and a seeded schedule of faults (SIGKILL + restart,
//     SIGSTOP past the lease + SIGCONT, cut database connections, slow database links);
//     then the faults stop, every transaction must reach a final state, and a checker
//     verifies the invariants over the database, each chain and the logs, every invariant
//     of a chain once per chain.
//
//   - db (not part of all; make chaos-db): a pg_auto_failover formation (monitor, primary,
//     standby) from the installed packages, the service on its multi-host DSN, load, and
//     failovers under it: planned, primary killed, primary killed while the standby lags;
//     synchronous or (-async) asynchronous replication.
//
//   - chain (not part of all; make chaos-chain): geth --dev or anvil (-chain-client) behind two endpoints and a
//     real clef as the external signer, load from several signers, and a seeded order of
//     chain-side faults: the preferred endpoint hangs, refuses, lags; the external signer
//     hangs; a spammer drives the base fee up 8x; the node restarts and loses its mempool;
//     a signer without funds is funded at the end. Then every transaction must be final
//     within a bound, with no false reorg and no fee above the caps.
//
// It prints one table per scenario and exits non-zero when any check fails.
package main

import (
	"context"
	"crypto/ecdsa"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/test/e2e"
)

type options struct {
	repo     string
	seed     uint64
	duration time.Duration
	nodes    int
	signers  int
	clients  int
	scenario string
	// chainClient is the chain scenario's node implementation: geth or anvil.
	chainClient string
	keepLogs    string
	keepDB      bool
	timeout     time.Duration
	// The db scenario: asynchronous replication, and the failovers to inject in order.
	async    bool
	dbFaults []string
}

func main() {
	var o options
	flag.StringVar(&o.repo, "repo", ".", "repository root (holds txmanager-service/)")
	flag.Uint64Var(&o.seed, "seed", uint64(time.Now().UnixNano()%1_000_000), "seed of the load and the fault schedule")
	flag.DurationVar(&o.duration, "duration", 45*time.Second, "how long load and faults run")
	flag.IntVar(&o.nodes, "nodes", 3, "service processes")
	flag.IntVar(&o.signers, "signers", 4, "signers the load spreads over")
	flag.IntVar(&o.clients, "clients", 8, "concurrent clients")
	flag.StringVar(&o.scenario, "scenario", "all", "failover, chaos, all (both), chain (geth --dev behind faulty endpoints; make chaos-chain), db (pg_auto_failover failovers; make chaos-db) or webhooks (a failing receiver and a killed node under load; make chaos-webhooks)")
	flag.StringVar(&o.chainClient, "chain-client", "geth", "chain scenario: the node implementation, geth (--dev, built from the module proxy) or anvil (`make test-binaries` unpacks it)")
	flag.BoolVar(&o.async, "async", false, "db scenario: asynchronous replication (default synchronous)")
	faults := flag.String("db-faults", strings.Join([]string{dbFaultPlanned, dbFaultKill, dbFaultKillLagging, dbFaultKillDeepLag}, ","), "db scenario: failovers to inject, in order")
	flag.StringVar(&o.keepLogs, "keep-logs", "", "copy nothing; keep the run folder (logs, configs) at this path")
	flag.BoolVar(&o.keepDB, "keep-db", false, "keep the run's databases for inspection")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, fmt.Sprintf("bound on the whole run (the db scenario adds %s per fault unless this is set)", dbHealWait))
	flag.Parse()
	o.dbFaults = strings.Split(*faults, ",")
	if o.scenario == "db" && !flagSet("timeout") {
		// The default bound leaves the faults' healing on top: two slow rejoins alone took
		// 4 and 3.4 minutes once, and the run ran out of time while checking the result.
		o.timeout += time.Duration(len(o.dbFaults)) * dbHealWait
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	ok, err := run(ctx, o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "txm-chaos:", err)
		os.Exit(1)
	}
	if !ok {
		fmt.Println("\ntxm-chaos: FAIL")
		os.Exit(1)
	}
	fmt.Println("\ntxm-chaos: PASS")
}

// secondChainID is the id of the run's second chain, next to txm-devchain's default
// (chain.SimulatedChainID).
const secondChainID = 31337

// runEnv is what the scenarios share: binaries, PostgreSQL, the chains, the keys.
type runEnv struct {
	keepDB     bool
	root       string
	serviceBin string
	pg         *e2e.Postgres
	// chains are the run's chains, each with its id; a single-chain scenario uses the first.
	chains     []e2e.ChainTarget
	signerKeys []*ecdsa.PrivateKey
	// failoverKey is a signer of its own: the chain outlives a scenario's database, so a
	// signer shared between scenarios would start the next one at a nonce its database
	// never allocated.
	failoverKey *ecdsa.PrivateKey
}

func (e *runEnv) dir(name string) string { return filepath.Join(e.root, name) }

func (e *runEnv) freshDatabase(ctx context.Context, name string) (*e2e.Database, error) {
	db, err := e.pg.CreateDatabase(ctx, "txm_chaos_"+name)
	if err == nil && e.keepDB {
		fmt.Printf("  database for %s: %s\n", name, db.DSN)
	}
	return db, err
}

// dropDatabase removes a run's database unless asked to keep it.
func (e *runEnv) dropDatabase(ctx context.Context, db *e2e.Database) {
	if !e.keepDB {
		_ = db.Drop(context.WithoutCancel(ctx))
	}
}

func run(ctx context.Context, o options) (bool, error) {
	started := time.Now()
	root := o.keepLogs
	if root == "" {
		dir, err := os.MkdirTemp("", "txm-chaos-")
		if err != nil {
			return false, err
		}
		defer os.RemoveAll(dir)
		root = dir
	} else if err := os.MkdirAll(root, 0o755); err != nil {
		return false, err
	}
	module := filepath.Join(o.repo, "txmanager-service")
	binDir := filepath.Join(root, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return false, err
	}
	serviceBin, err := e2e.BuildService(ctx, module, binDir)
	if err != nil {
		return false, err
	}
	if o.scenario == "db" {
		// The database servers run as the postgres user and keep their folders under root.
		if err := os.Chmod(root, 0o755); err != nil {
			return false, err
		}
		chainBin, err := e2e.BuildDevChain(ctx, module, binDir)
		if err != nil {
			return false, err
		}
		rows, err := runDBScenario(ctx, o, root, serviceBin, chainBin)
		if err != nil {
			return false, fmt.Errorf("db: %w", err)
		}
		all := printTable(os.Stdout, fmt.Sprintf("database failover (seed %d, %s replication)", o.seed, replicationMode(o.async)), rows)
		fmt.Printf("\nwall time %s\n", time.Since(started).Round(time.Second))
		return all, nil
	}
	pg, err := e2e.FindPostgres(ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = pg.Close() }()
	if o.scenario == "webhooks" {
		rows, err := runWebhookScenario(ctx, o, root, pg, serviceBin)
		if err != nil {
			return false, fmt.Errorf("webhooks: %w", err)
		}
		all := printTable(os.Stdout, fmt.Sprintf("webhooks under load (seed %d)", o.seed), rows)
		fmt.Printf("\nwall time %s\n", time.Since(started).Round(time.Second))
		return all, nil
	}
	if o.scenario == "chain" {
		rows, err := runChainScenario(ctx, o, root, pg, serviceBin)
		if err != nil {
			return false, fmt.Errorf("chain: %w", err)
		}
		all := printTable(os.Stdout, fmt.Sprintf("chain faults (seed %d)", o.seed), rows)
		fmt.Printf("\nwall time %s\n", time.Since(started).Round(time.Second))
		return all, nil
	}
	chainBin, err := e2e.BuildDevChain(ctx, module, binDir)
	if err != nil {
		return false, err
	}
	env := &runEnv{keepDB: o.keepDB, root: root, serviceBin: serviceBin, pg: pg}
	// The same development keys are funded on both chains: one key is a signer on each,
	// with its own nonces and leases there.
	for _, id := range []uint64{chain.SimulatedChainID, secondChainID} {
		devChain, err := e2e.StartDevChain(ctx, e2e.DevChainOptions{
			Bin: chainBin, BlockInterval: 500 * time.Millisecond, Accounts: o.signers + 1, ChainID: id,
			Dir: filepath.Join(root, fmt.Sprintf("chain-%d", id)),
		})
		if err != nil {
			return false, fmt.Errorf("chain %d: %w", id, err)
		}
		defer func() { _ = devChain.Stop() }()
		env.chains = append(env.chains, e2e.ChainTarget{ID: id, RPCURL: devChain.URL()})
	}
	keys, err := chain.DevKeys(o.signers + 1)
	if err != nil {
		return false, err
	}
	env.signerKeys, env.failoverKey = keys[:o.signers], keys[o.signers]
	fmt.Printf("txm-chaos: seed %d, %d nodes, %d signers, %d clients, %s of faults; PostgreSQL: %s; chains: txm-devchain %d and %d (500ms blocks)\n",
		o.seed, o.nodes, o.signers, o.clients, o.duration, pg.Source, env.chains[0].ID, env.chains[1].ID)

	all := true
	if o.scenario == "all" || o.scenario == "failover" {
		rows, err := runFailover(ctx, env)
		if err != nil {
			return false, fmt.Errorf("failover: %w", err)
		}
		all = printTable(os.Stdout, "failover (design check 3)", rows) && all
	}
	if o.scenario == "all" || o.scenario == "chaos" {
		rows, events, err := runChaos(ctx, env, o)
		for _, ev := range events {
			fmt.Printf("  fault at %6s  %-14s %-7s %s\n", ev.at, ev.kind, ev.node, ev.note)
		}
		if err != nil {
			return false, fmt.Errorf("chaos: %w", err)
		}
		all = printTable(os.Stdout, fmt.Sprintf("chaos (seed %d, %d faults)", o.seed, len(events)), rows) && all
	}
	fmt.Printf("\nwall time %s\n", time.Since(started).Round(time.Second))
	return all, nil
}

// runChaos is the randomized run.
func runChaos(ctx context.Context, env *runEnv, o options) ([]row, []faultEvent, error) {
	db, err := env.freshDatabase(ctx, "chaos")
	if err != nil {
		return nil, nil, err
	}
	defer env.dropDatabase(ctx, db)
	c, err := startCluster(ctx, clusterOptions{
		bin: env.serviceBin, dir: env.dir("chaos"), dsn: db.DSN, adminDSN: env.pg.AdminDSN,
		chains: env.chains, signers: env.signerKeys, count: o.nodes,
	})
	if err != nil {
		return nil, nil, err
	}
	defer c.stop()
	signers := e2e.Addresses(env.signerKeys)
	rec := newLoadRecord()
	faultCtx, stopFaults := context.WithCancel(ctx)
	eventsCh := make(chan []faultEvent, 1)
	go func() { eventsCh <- injectFaults(faultCtx, c, o.seed, 3*time.Second) }()
	chainIDs := make([]uint64, len(env.chains))
	for i, ch := range env.chains {
		chainIDs[i] = ch.ID
	}
	runLoad(ctx, loadOptions{targets: c.clients(), signers: signers, chains: chainIDs, clients: o.clients, duration: o.duration, seed: o.seed}, rec)
	stopFaults()
	events := <-eventsCh
	if err := c.heal(ctx); err != nil {
		return nil, events, fmt.Errorf("healing the cluster: %w", err)
	}
	conn, err := pgx.Connect(ctx, db.DSN)
	if err != nil {
		return nil, events, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	settleStarted := time.Now()
	open, err := waitFinal(ctx, conn, 3*time.Minute)
	if err != nil {
		return nil, events, err
	}
	fmt.Printf("  after the faults stopped, %d transactions still open after %s of settling\n", open, time.Since(settleStarted).Round(time.Second))
	rows, err := checkRun(ctx, runCheck{
		db: conn, chains: env.chains, api: c.client(c.nodes[0]), rec: rec, logs: c.logPaths(), signers: signers, leaseFaults: true,
	})
	if err != nil {
		return nil, events, err
	}
	kinds := map[string]int{}
	for _, ev := range events {
		kinds[ev.kind]++
	}
	for _, k := range []string{"kill", "pause", "cut-db", "slow-db"} {
		rows = append(rows, row{"faults injected: " + k, kinds[k], "> 0"})
	}
	rec.mu.Lock()
	fmt.Printf("  answers that were not an acknowledgement (retried or final): %s\n", strings.TrimPrefix(fmt.Sprint(rec.errorsSeen), "map"))
	rec.mu.Unlock()
	return rows, events, nil
}

// flagSet reports whether the command line set the named flag.
func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
