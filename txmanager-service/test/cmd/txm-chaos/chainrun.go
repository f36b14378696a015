package main

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/params"
	"github.com/ethereum/go-ethereum/rpc"
	"github.com/jackc/pgx/v5"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/test/e2e"
	"github.com/bionicotaku/txmanager-service/test/faultproxy"
)

// Chain scenario bounds. The deadlines are short so a hang costs seconds, not the
// defaults' tens of seconds; every fault outlasts them.
const (
	chainReadDeadline = 2 * time.Second
	chainSendDeadline = 3 * time.Second
	signerDeadline    = 2 * time.Second
	// settleBound is the N of "every transaction final N seconds after the faults stop".
	settleBound = 3 * time.Minute
	// Fee caps the service is configured with; nothing signed may exceed them.
	feeCapWei int64 = 500 * params.GWei
	tipCapWei int64 = 50 * params.GWei
	// spikeFactor is how far the base fee is driven up.
	spikeFactor = 8
)

// chainEnv is what the chain scenario runs on: a development node (geth --dev or anvil)
// behind two fault proxies (the service's two endpoints for the same chain), a real clef
// behind a proxy that can make it hang, and the service.
type chainEnv struct {
	dev    devNode
	nodeMu sync.Mutex
	node   *e2e.ChainNode

	endpoints [2]*faultproxy.Proxy // [0] is the preferred endpoint, the one faults hit
	signer    *externalSigner
	svc       *e2e.Service
	db        *pgx.Conn
	api       *e2e.Client
	rec       *loadRecord

	local    []common.Address // funded raw-key signers
	external common.Address   // the external signer's account
	unfunded common.Address   // a raw-key signer funded only after the faults
	spammer  *ecdsa.PrivateKey
}

func (c *chainEnv) nodeURL() string {
	c.nodeMu.Lock()
	defer c.nodeMu.Unlock()
	return c.node.URL()
}

// devNode is the scenario's node implementation: what it is, and how to start it on the
// run's data, again after a stop, with the chain continuing and the mempool gone.
type devNode struct {
	name, version string
	start         func(ctx context.Context) (*e2e.ChainNode, error)
}

// prepareDevNode builds geth (reused across runs) or finds anvil, for -chain-client.
func prepareDevNode(ctx context.Context, client, repo, root string) (devNode, error) {
	switch client {
	case "geth":
		bin, version, err := e2e.BuildGeth(ctx, filepath.Join(repo, "bin"))
		if err != nil {
			return devNode{}, err
		}
		dir := filepath.Join(root, "geth")
		return devNode{name: "geth", version: version + " --dev", start: func(ctx context.Context) (*e2e.ChainNode, error) {
			// No local-transaction journal, so a restart loses the mempool.
			return e2e.StartGeth(ctx, e2e.GethOptions{Bin: bin, Period: time.Second, Dir: dir, ExtraArgs: []string{"--txpool.nolocals"}})
		}}, nil
	case "anvil":
		bin, err := e2e.FindAnvil()
		if err != nil {
			return devNode{}, err
		}
		dir := filepath.Join(root, "anvil")
		return devNode{name: "anvil", version: e2e.AnvilVersion, start: func(ctx context.Context) (*e2e.ChainNode, error) {
			// The state file carries the chain across a restart; anvil keeps no mempool in it.
			// Chain id 1337 is geth --dev's, the one the external signer (clef) is set up for.
			return e2e.StartAnvil(ctx, e2e.AnvilOptions{Bin: bin, BlockTime: time.Second, ChainID: 1337, Dir: dir, StateFile: filepath.Join(dir, "state.json")})
		}}, nil
	default:
		return devNode{}, fmt.Errorf("-chain-client %q: want geth or anvil", client)
	}
}

// phaseLoad records the creates of each phase: attempted, acknowledged, and how long each
// took, so a fault's effect on callers is a figure.
type phaseLoad struct {
	current atomic.Pointer[string]
	mu      sync.Mutex
	stats   map[string]*phaseStats
}

type phaseStats struct {
	attempted, acked int
	latencies        []time.Duration
}

func (p *phaseLoad) set(phase string) { p.current.Store(&phase) }

func (p *phaseLoad) record(phase string, acked bool, took time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats[phase]
	if s == nil {
		s = &phaseStats{}
		p.stats[phase] = s
	}
	s.attempted++
	if acked {
		s.acked++
	}
	s.latencies = append(s.latencies, took)
}

// successPercent is the acknowledged share of the creates over the phases in which keep
// says a healthy endpoint remained, rounded down; -1 when there were none.
func (p *phaseLoad) successPercent(keep func(phase string) bool) (pct, attempted int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	acked := 0
	for phase, s := range p.stats {
		if keep(phase) {
			attempted += s.attempted
			acked += s.acked
		}
	}
	if attempted == 0 {
		return -1, 0
	}
	return acked * 100 / attempted, attempted
}

func (p *phaseLoad) summary(phase string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats[phase]
	if s == nil || s.attempted == 0 {
		return "no creates"
	}
	lat := slices.Clone(s.latencies)
	slices.Sort(lat)
	p99 := lat[min(len(lat)-1, len(lat)*99/100)]
	return fmt.Sprintf("%d/%d creates acknowledged, p50 %s p99 %s max %s", s.acked, s.attempted,
		lat[len(lat)/2].Round(time.Millisecond), p99.Round(time.Millisecond), lat[len(lat)-1].Round(time.Millisecond))
}

// runChainLoad sends transfers for random signers until ctx ends, each with a request id
// (so an unclear failure is retried safely), paced to leave the chain room.
func runChainLoad(ctx context.Context, api *e2e.Client, signers []common.Address, clients int, seed uint64, rec *loadRecord, phases *phaseLoad) {
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(seed, uint64(c)+100))
			for n := 0; ctx.Err() == nil; n++ {
				req := &v1.CreateTxRequest{
					Signer:    signers[r.IntN(len(signers))].Hex(),
					To:        e2e.Recipient().Hex(),
					Value:     fmt.Sprint(1 + r.IntN(1_000_000)),
					GasLimit:  21_000,
					RequestId: fmt.Sprintf("chain-%d-%d-%d", seed, c, n),
				}
				phase := *phases.current.Load()
				started := time.Now()
				acked := rec.create(ctx, []*e2e.Client{api}, r, req)
				if ctx.Err() == nil {
					phases.record(phase, acked, time.Since(started))
				}
				_ = sleepCtx(ctx, time.Duration(50+r.IntN(100))*time.Millisecond)
			}
		})
	}
	wg.Wait()
}

// chainFault is one fault of the schedule: start it, and end it (nil when it ends itself).
type chainFault struct {
	name string
	run  func(ctx context.Context, c *chainEnv, hold time.Duration) (string, error)
}

func chainFaults() []chainFault {
	return []chainFault{
		{"endpoint-hang", func(ctx context.Context, c *chainEnv, hold time.Duration) (string, error) {
			return proxyFault(ctx, c.endpoints[0], faultproxy.Hang, hold)
		}},
		{"endpoint-refuse", func(ctx context.Context, c *chainEnv, hold time.Duration) (string, error) {
			return proxyFault(ctx, c.endpoints[0], faultproxy.Refuse, hold)
		}},
		{"endpoint-lag", func(ctx context.Context, c *chainEnv, hold time.Duration) (string, error) {
			// Further behind than chain.health.maxLagBlocks, on every other request: a load
			// balancer over a current and a lagging backend, the case that fools receipts.
			c.endpoints[0].SetLag(6, true)
			return proxyFault(ctx, c.endpoints[0], faultproxy.Lag, hold)
		}},
		{"signer-hang", func(ctx context.Context, c *chainEnv, hold time.Duration) (string, error) {
			if err := c.signer.Hang(); err != nil {
				return "", err
			}
			err := sleepCtx(ctx, hold)
			held, releaseErr := c.signer.Release()
			return fmt.Sprintf("clef silent for %s; %d signing requests held", hold, held), errors.Join(err, releaseErr)
		}},
		{"base-fee-spike", func(ctx context.Context, c *chainEnv, _ time.Duration) (string, error) {
			res, err := spikeBaseFee(ctx, c.nodeURL(), c.spammer, spikeFactor, 2*time.Minute)
			return res.String(), err
		}},
		{"node-restart", restartNode},
	}
}

// shuffledChainFaults is every chain fault once, in the order r (seeded from the run's
// seed) gives: a seed replays the same schedule.
func shuffledChainFaults(r *rand.Rand) []chainFault {
	faults := chainFaults()
	r.Shuffle(len(faults), func(i, j int) { faults[i], faults[j] = faults[j], faults[i] })
	return faults
}

func proxyFault(ctx context.Context, p *faultproxy.Proxy, mode faultproxy.Mode, hold time.Duration) (string, error) {
	if err := p.SetMode(mode); err != nil {
		return "", err
	}
	err := sleepCtx(ctx, hold)
	return fmt.Sprintf("preferred endpoint %s for %s", mode, hold), errors.Join(err, p.SetMode(faultproxy.Pass))
}

// restartNode stops the node and starts it again on the same data: the chain continues,
// the mempool does not (geth keeps no journal, anvil's state file holds none), as when a provider
// restarts or replaces the node behind an endpoint. While it is down both endpoints fail.
func restartNode(ctx context.Context, c *chainEnv, _ time.Duration) (string, error) {
	// The load alone keeps under a block's worth of transactions in the pool; a burst makes
	// sure the restart takes a real mempool with it: the node is stopped as soon as a good
	// part of the burst is in its pool, broadcast and not yet mined.
	burstAcked, err := c.burst(ctx, 200)
	if err != nil {
		return "", err
	}
	c.nodeMu.Lock()
	defer c.nodeMu.Unlock()
	before := 0
	for wait := time.Now().Add(5 * time.Second); time.Now().Before(wait); {
		if before, err = mempoolSize(ctx, c.node.URL()); err != nil {
			return "", fmt.Errorf("mempool before restart: %w", err)
		}
		if before >= 50 {
			break
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return "", err
		}
	}
	if err := c.node.Stop(); err != nil {
		return "", fmt.Errorf("stop %s: %w", c.dev.name, err)
	}
	if err := sleepCtx(ctx, 2*time.Second); err != nil {
		return "", err
	}
	node, err := c.dev.start(ctx)
	if err != nil {
		return "", fmt.Errorf("restart %s: %w", c.dev.name, err)
	}
	c.node = node
	// Read before the endpoints lead to the new node, so nothing was rebroadcast yet.
	after, err := mempoolSize(ctx, node.URL())
	if err != nil {
		return "", fmt.Errorf("mempool after restart: %w", err)
	}
	for _, p := range c.endpoints {
		p.SetUpstream(node.URL())
	}
	return fmt.Sprintf("burst of %d creates, then mempool %d -> %d transactions across the restart", burstAcked, before, after), nil
}

// burst sends n creates at once, spread over the funded signers, and reports how many
// were acknowledged; they join the load's record, so the checks cover them.
func (c *chainEnv) burst(ctx context.Context, n int) (int, error) {
	var (
		wg    sync.WaitGroup
		acked atomic.Int64
	)
	next := make(chan int)
	for w := range 16 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(n), uint64(w)))
			for i := range next {
				req := &v1.CreateTxRequest{
					Signer: c.local[i%len(c.local)].Hex(), To: e2e.Recipient().Hex(), Value: "1", GasLimit: 21_000,
					RequestId: fmt.Sprintf("burst-%d", i),
				}
				if c.rec.create(ctx, []*e2e.Client{c.api}, r, req) {
					acked.Add(1)
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	return int(acked.Load()), ctx.Err()
}

func mempoolSize(ctx context.Context, url string) (int, error) {
	client, err := rpc.DialContext(ctx, url)
	if err != nil {
		return 0, err
	}
	defer client.Close()
	var status struct{ Pending, Queued hexutil.Uint }
	if err := client.CallContext(ctx, &status, "txpool_status"); err != nil {
		return 0, err
	}
	return int(status.Pending + status.Queued), nil
}

// runChainScenario is the chain-side chaos run (make chaos-chain).
func runChainScenario(ctx context.Context, o options, root string, pg *e2e.Postgres, serviceBin string) ([]row, error) {
	started := time.Now()
	dev, err := prepareDevNode(ctx, o.chainClient, o.repo, root)
	if err != nil {
		return nil, err
	}
	c := &chainEnv{dev: dev}
	if c.node, err = dev.start(ctx); err != nil {
		return nil, err
	}
	defer func() {
		c.nodeMu.Lock()
		defer c.nodeMu.Unlock()
		_ = c.node.Stop()
	}()
	fmt.Printf("txm-chaos chain: seed %d, %s %s (1s blocks) behind two endpoints; PostgreSQL: %s\n", o.seed, dev.name, dev.version, pg.Source)

	keys := e2e.Keys(o.signers + 3)
	localKeys, externalKey, unfundedKey := keys[:o.signers], keys[o.signers], keys[o.signers+1]
	c.spammer = keys[o.signers+2]
	c.local, c.external, c.unfunded = e2e.Addresses(localKeys), e2e.Address(externalKey), e2e.Address(unfundedKey)
	ether := func(n int64) *big.Int { return new(big.Int).Mul(big.NewInt(n), big.NewInt(params.Ether)) }
	if err := e2e.FundAccounts(ctx, c.nodeURL(), append(slices.Clone(c.local), c.external), ether(10)); err != nil {
		return nil, err
	}
	if err := e2e.FundAccounts(ctx, c.nodeURL(), []common.Address{e2e.Address(c.spammer)}, ether(1000)); err != nil {
		return nil, err
	}
	for i := range c.endpoints {
		if c.endpoints[i], err = faultproxy.Start(c.nodeURL()); err != nil {
			return nil, err
		}
		defer c.endpoints[i].Close()
	}
	if c.signer, err = startExternalSigner(ctx, filepath.Join(o.repo, "bin"), filepath.Join(root, "clef"), externalKey, big.NewInt(1337)); err != nil {
		return nil, err
	}
	defer func() { _ = c.signer.Close() }()

	db, err := pg.CreateDatabase(ctx, "txm_chaos_chain")
	if err != nil {
		return nil, err
	}
	if !o.keepDB {
		defer func() { _ = db.Drop(context.WithoutCancel(ctx)) }()
	}
	cfg := e2e.FastLoops(e2e.ServiceConfig{
		NodeID:      "chaos-chain-1",
		DatabaseDSN: db.DSN,
		ChainRPCURL: c.endpoints[0].URL() + "," + c.endpoints[1].URL(),
		Signers:     append(slices.Clone(localKeys), unfundedKey),
		Overrides: map[string]any{
			"chain.timeouts.read":        chainReadDeadline,
			"chain.timeouts.send":        chainSendDeadline,
			"chain.timeouts.receipts":    chainSendDeadline,
			"chain.health.probeInterval": "500ms",
			"chain.broadcastToAll":       true,
			"signers.external.url":       c.signer.URL(),
			"signers.external.addresses": []string{c.external.Hex()},
			"signers.external.timeout":   signerDeadline,
			"fees.maxFeePerGas":          strconv.FormatInt(feeCapWei, 10),
			"fees.maxPriorityFeePerGas":  strconv.FormatInt(tipCapWei, 10),
			"resubmit.interval":          "5s",
			"stuck.minAge":               "30s",
			"stuck.minAttempts":          2,
			"nonce.holeGrace":            "10s",
			"observability.metricsAuth":  false,
			"pipeline.signerConcurrency": 16,
			"routing.mode":               "basic",
			"feed.sequenceInterval":      "100ms",
			"create.estimateGas":         true,
			// The late-funding phase needs the unfunded signer's creates admitted, as when a
			// balance is spent outside the service after admission: they must wait, then
			// confirm once it is funded. Admission refusals are tested in admission_test.go.
			"create.checkFunds":             false,
			"confirmations.useFinalizedTag": false,
		},
	})
	c.svc, err = e2e.StartService(ctx, e2e.ServiceOptions{Bin: serviceBin, Config: cfg, Dir: filepath.Join(root, "chain-service")})
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.svc.Stop() }()
	if c.db, err = pgx.Connect(ctx, db.DSN); err != nil {
		return nil, err
	}
	defer c.db.Close(context.WithoutCancel(ctx))
	c.api = e2e.NewClient(c.svc.HTTPURL())
	api := c.api

	phases := &phaseLoad{stats: map[string]*phaseStats{}}
	phases.set("calm")
	rec := newLoadRecord()
	c.rec = rec
	loadCtx, stopLoad := context.WithCancel(ctx)
	loadDone := make(chan struct{})
	signers := append(append(slices.Clone(c.local), c.external), c.unfunded)
	go func() {
		defer close(loadDone)
		runChainLoad(loadCtx, api, signers, o.clients, o.seed, rec, phases)
	}()
	defer stopLoad()

	r := rand.New(rand.NewPCG(o.seed, 11))
	faults := shuffledChainFaults(r)
	var events []faultEvent
	faultsStarted := time.Now()
	calm := func() error { return sleepCtx(ctx, time.Duration(3000+r.IntN(4000))*time.Millisecond) }
	if err := calm(); err != nil {
		return nil, err
	}
	for _, f := range faults {
		hold := time.Duration(8000+r.IntN(6000)) * time.Millisecond
		before, err := confirmedCount(ctx, c.db, c.local)
		if err != nil {
			return nil, err
		}
		phases.set(f.name)
		at := time.Since(faultsStarted)
		note, err := f.run(ctx, c, hold)
		phases.set("calm")
		if err != nil {
			return nil, fmt.Errorf("fault %s: %w", f.name, err)
		}
		after, err := confirmedCount(ctx, c.db, c.local)
		if err != nil {
			return nil, err
		}
		events = append(events, faultEvent{at: at.Round(100 * time.Millisecond), kind: f.name, note: fmt.Sprintf("%s; creates: %s; funded signers confirmed %d during it",
			note, phases.summary(f.name), after-before)})
		if err := calm(); err != nil {
			return nil, err
		}
	}
	// Last, the unfunded signer gets its money: what waited for funds must now go through.
	phases.set("funding")
	if err := e2e.FundAccounts(ctx, c.nodeURL(), []common.Address{c.unfunded}, ether(10)); err != nil {
		return nil, fmt.Errorf("funding %s: %w", c.unfunded, err)
	}
	events = append(events, faultEvent{at: time.Since(faultsStarted).Round(100 * time.Millisecond), kind: "funded", note: "the unfunded signer received 10 ETH"})
	_ = sleepCtx(ctx, 3*time.Second)
	stopLoad()
	<-loadDone
	for _, ev := range events {
		fmt.Printf("  fault at %6s  %-16s %s\n", ev.at, ev.kind, ev.note)
	}
	rec.mu.Lock()
	fmt.Printf("  answers that were not an acknowledgement (each retried with its request id): %s\n", strings.TrimPrefix(fmt.Sprint(rec.errorsSeen), "map"))
	rec.mu.Unlock()
	// Creates still under way when a fault ended are in these, unlike in the notes above.
	for _, phase := range append([]string{"calm"}, faultNames(events)...) {
		fmt.Printf("  creates started during %-16s %s\n", phase+":", phases.summary(phase))
	}

	settleStarted := time.Now()
	open, err := waitFinal(ctx, c.db, settleBound)
	if err != nil {
		return nil, err
	}
	settled := time.Since(settleStarted)
	fmt.Printf("  after the faults stopped: %d transactions open after %s (bound %s)\n", open, settled.Round(time.Second), settleBound)

	// One chain, named by the node itself: the database holds that chain's rows only.
	rows, err := checkRun(ctx, runCheck{db: c.db, chains: []e2e.ChainTarget{{RPCURL: c.nodeURL()}}, api: api, rec: rec, signers: signers})
	if err != nil {
		return nil, err
	}
	chainRows, err := c.checkChainFaults(ctx, phases, events)
	if err != nil {
		return nil, err
	}
	rows = append(rows, chainRows...)
	rows = append(rows, row{"seconds from last fault to all final", int(settled.Seconds()), fmt.Sprintf("<= %d", int(settleBound.Seconds()))})
	fmt.Printf("  chain scenario wall time %s\n", time.Since(started).Round(time.Second))
	return rows, nil
}

// checkChainFaults adds the chain scenario's own checks to the common ones.
func (c *chainEnv) checkChainFaults(ctx context.Context, phases *phaseLoad, events []faultEvent) ([]row, error) {
	var rows []row
	metrics, err := scrapeMetrics(ctx, c.svc.HTTPURL()+"/metrics")
	if err != nil {
		return nil, err
	}
	// A development node has one sealer and no peers: it never reorganises, so any reorg the
	// service declared was false (a lagging endpoint taken for a fork).
	rows = append(rows, row{"false reorgs (reorg_total on a chain that never reorgs)", int(metrics["reorg_total"]), "0"})
	over, err := countOf(ctx, c.db, "SELECT count(*) FROM tx_attempt WHERE max_fee_per_gas > $1 OR max_priority_fee_per_gas > $2",
		strconv.FormatInt(feeCapWei, 10), strconv.FormatInt(tipCapWei, 10))
	if err != nil {
		return nil, err
	}
	rows = append(rows, row{"attempts signed above the fee caps", over, "0"})
	failed, err := countOf(ctx, c.db, "SELECT count(*) FROM managed_tx WHERE state = 'FAILED_FINAL'")
	if err != nil {
		return nil, err
	}
	rows = append(rows, row{"transactions FAILED_FINAL (every one should confirm)", failed, "0"})
	external, err := countOf(ctx, c.db, "SELECT count(*) FROM managed_tx WHERE signer = $1 AND state = 'CONFIRMED'", c.external.Hex())
	if err != nil {
		return nil, err
	}
	rows = append(rows, row{"external signer's transactions confirmed", external, "> 0"})
	unfunded, err := countOf(ctx, c.db, "SELECT count(*) FROM managed_tx WHERE signer = $1 AND state = 'CONFIRMED'", c.unfunded.Hex())
	if err != nil {
		return nil, err
	}
	rows = append(rows, row{"funded-later signer's transactions confirmed", unfunded, "> 0"})

	txs, err := countOf(ctx, c.db, "SELECT count(*) FROM managed_tx")
	if err != nil {
		return nil, err
	}
	attempts, err := countOf(ctx, c.db, "SELECT count(*) FROM tx_attempt")
	if err != nil {
		return nil, err
	}
	fmt.Printf("  signed attempts %d for %d transactions (%.2f per transaction); re-priced: %v raised, %v at cap; rebroadcasts: %v\n",
		attempts, txs, float64(attempts)/float64(max(txs, 1)), metrics[`reprice_total{result="raised"}`], metrics[`reprice_total{result="at_cap"}`], metrics["resubmit_total"])

	healthy := func(phase string) bool { return phase != "node-restart" }
	pct, n := phases.successPercent(healthy)
	rows = append(rows, row{fmt.Sprintf("create success %% while an endpoint stayed healthy (%d)", n), pct, ">= 99"})
	for _, ev := range events {
		if ev.kind == "base-fee-spike" {
			rows = append(rows, row{"base fee multiple reached by the spike", spikeMultiple(ev.note), fmt.Sprintf(">= %d", spikeFactor)})
		}
		if ev.kind == "node-restart" {
			rows = append(rows, row{"mempool transactions lost in the node restart", mempoolLost(ev.note), "> 0"})
		}
		if ev.kind == "endpoint-hang" || ev.kind == "signer-hang" {
			rows = append(rows, row{"funded signers confirmed during " + ev.kind, confirmedDuring(ev.note), "> 0"})
		}
	}
	return rows, nil
}

func faultNames(events []faultEvent) []string {
	var names []string
	for _, ev := range events {
		names = append(names, ev.kind)
	}
	return names
}

func confirmedCount(ctx context.Context, db *pgx.Conn, signers []common.Address) (int, error) {
	hexes := make([]string, len(signers))
	for i, s := range signers {
		hexes[i] = s.Hex()
	}
	var n int
	err := db.QueryRow(ctx, "SELECT count(*) FROM managed_tx WHERE state = 'CONFIRMED' AND signer = ANY($1)", hexes).Scan(&n)
	return n, err
}

// The notes carry the figures the rows check; these read them back.
func spikeMultiple(note string) int { return scanInt(note, "(", "x)") }
func mempoolLost(note string) int {
	return scanInt(note, "mempool ", " ->") - scanInt(note, "-> ", " transactions")
}
func confirmedDuring(note string) int { return scanInt(note, "confirmed ", " during") }
func scanInt(s, before, after string) int {
	_, rest, ok := strings.Cut(s, before)
	if !ok {
		return -1
	}
	num, _, ok := strings.Cut(rest, after)
	if !ok {
		return -1
	}
	var n int
	if _, err := fmt.Sscan(num, &n); err != nil {
		return -1
	}
	return n
}

// scrapeMetrics reads the Prometheus text page at url as metricTotals.
func scrapeMetrics(ctx context.Context, url string) (map[string]float64, error) {
	series, err := e2e.ScrapeMetrics(ctx, url)
	if err != nil {
		return nil, err
	}
	return metricTotals(series), nil
}

// metricTotals is every series, plus under each name without labels the sum of all its
// series, and under name{result="..."} the sum of its series with that result label (the
// checks name those, without the scope labels the exporter adds).
func metricTotals(series map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for s, v := range series {
		out[s] += v
		name, labels, labelled := strings.Cut(s, "{")
		if !labelled {
			continue
		}
		out[name] += v
		for l := range strings.SplitSeq(strings.TrimSuffix(labels, "}"), ",") {
			if strings.HasPrefix(l, "result=") {
				out[name+"{"+l+"}"] += v
			}
		}
	}
	return out
}
