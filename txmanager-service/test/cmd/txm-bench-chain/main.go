// Command txm-bench-chain measures the service end to end against a real node (make
// bench-chain): geth v1.17.8 --dev with a block gas limit and transaction pool large enough
// that neither block space nor the pool is the limit, and, for each shape (20 signers and
// 1 signer, 20,000 transfers by default):
//
//   - a baseline: a bare sender that pre-signs every transfer and pushes them with batched
//     eth_sendRawTransaction as fast as the node takes them, then waits until every one has
//     the same confirmations the service waits for: the node's own limit on this machine;
//   - the service: the same transfers created through its HTTP API by concurrent clients,
//     from the first create until every one is CONFIRMED.
//
// It prints both times and their ratio per shape. Each measurement uses signers of its own,
// so every one starts at nonce 0 on the same chain.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/big"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ethereum/go-ethereum/params"

	"github.com/bionicotaku/txmanager-service/test/e2e"
	"github.com/bionicotaku/txmanager-service/test/runcost"
)

type options struct {
	repo          string
	transfers     int
	warmup        int
	shapes        []int
	clients       int
	batch         int
	confirmations uint64
	target        float64
	timeout       time.Duration
	verbose       bool
	keep          bool
	nodeProfile   bool
	// overrides are service configuration keys set for the run (-set), e.g. to compare a
	// setting's cost on the same workload.
	overrides map[string]any
}

// confirmationsDefault matches e2e.FastLoops, which the service runs with.
const confirmationsDefault = 2

func main() {
	o := options{shapes: []int{20, 1}, confirmations: confirmationsDefault, overrides: map[string]any{}}
	flag.StringVar(&o.repo, "repo", ".", "repository root (holds txmanager-service/ and bin/)")
	flag.IntVar(&o.transfers, "transfers", 20_000, "transfers per shape")
	flag.IntVar(&o.warmup, "warmup", 2_000, "transfers the service creates and confirms before the measured run, then VACUUM (ANALYZE): the database has history and statistics, as one in service has (0: a fresh database, whose first plans are made without statistics)")
	flag.IntVar(&o.batch, "batch", 0, "send the service's creates in batches of this many (POST /api/v1/tx:batch; 0 or 1: one create a request)")
	flag.IntVar(&o.clients, "clients", 256, "concurrent HTTP clients creating transactions (a payout run or a busy API has hundreds of callers in flight)")
	flag.Float64Var(&o.target, "target", 2, "the service may take at most this many times the baseline's time from first create (or send) to all confirmed")
	flag.BoolVar(&o.nodeProfile, "node-profile", false, "profile geth itself (debug_startCPUProfile) over each baseline and service run and print the top of each: where the node's CPU goes, and what the service's calls add to it")
	flag.BoolVar(&o.verbose, "v", false, "print the service's progress (allocated, broadcast, mined, confirmed) every second")
	flag.Func("signers", "signer counts to run, comma separated (default 20,1)", func(v string) error {
		o.shapes = nil
		for _, field := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(field))
			if err != nil || n < 1 {
				return fmt.Errorf("signer count %q: want a positive integer", field)
			}
			o.shapes = append(o.shapes, n)
		}
		return nil
	})
	flag.Func("set", "a service configuration key for the run, as key=value (a number, true or false, or text; repeatable), e.g. -set writer.workers=4", func(v string) error {
		key, value, ok := strings.Cut(v, "=")
		if !ok || strings.TrimSpace(key) == "" {
			return fmt.Errorf("want key=value, got %q", v)
		}
		var parsed any
		if err := json.Unmarshal([]byte(value), &parsed); err != nil {
			parsed = value // plain text
		}
		o.overrides[strings.TrimSpace(key)] = parsed
		return nil
	})
	flag.BoolVar(&o.keep, "keep", false, "keep the work folder (the service's and geth's logs) and print its path")
	flag.DurationVar(&o.timeout, "timeout", 30*time.Minute, "bound on the whole run")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	results, err := run(ctx, o)
	printResults(os.Stdout, results, o.target)
	if err != nil {
		fmt.Fprintln(os.Stderr, "txm-bench-chain:", err)
		os.Exit(1)
	}
}

// result is one shape's figures.
type result struct {
	signers  int
	baseline measurement
	service  measurement
}

type measurement struct {
	transfers int
	// accepted is first send (or create) -> last one accepted by the node (or answered).
	accepted time.Duration
	// confirmed is first send (or create) -> every transfer with the confirmations.
	confirmed time.Duration
	blocks    int // blocks the transfers were mined in
	cpu       runcost.CPUReport
}

// perTransferMillis is seconds of CPU per transfer in milliseconds.
func (m measurement) perTransferMillis(seconds float64) float64 {
	if m.transfers == 0 {
		return 0
	}
	return 1000 * seconds / float64(m.transfers)
}

func (m measurement) perSecond() float64 {
	if m.confirmed <= 0 {
		return 0
	}
	return float64(m.transfers) / m.confirmed.Seconds()
}

func run(ctx context.Context, o options) ([]result, error) {
	root, err := os.MkdirTemp("", "txm-bench-chain-")
	if err != nil {
		return nil, err
	}
	if o.keep {
		fmt.Printf("work folder (kept): %s\n", root)
	} else {
		defer os.RemoveAll(root)
	}
	gethBin, version, err := e2e.BuildGeth(ctx, filepath.Join(o.repo, "bin"))
	if err != nil {
		return nil, err
	}
	serviceBin, err := e2e.BuildService(ctx, filepath.Join(o.repo, "txmanager-service"), filepath.Join(root, "bin"))
	if err != nil {
		return nil, err
	}
	// A cluster of the run's own: pg_stat_statements needs shared_preload_libraries, which
	// only a start sets, and the WAL and background processes it counts are then the run's.
	pg, err := e2e.StartPostgres(ctx, runcost.PostgresSettings...)
	if err != nil {
		return nil, fmt.Errorf("start PostgreSQL with pg_stat_statements: %w", err)
	}
	defer func() { _ = pg.Close() }()
	geth, err := e2e.StartGeth(ctx, e2e.GethOptions{Bin: gethBin, Period: time.Second, Dir: filepath.Join(root, "geth"), ExtraArgs: roomyNode(max(o.transfers, o.warmup)),
		DebugAPI: o.nodeProfile})
	if err != nil {
		return nil, err
	}
	defer func() { _ = geth.Stop() }()
	fmt.Printf("txm-bench-chain: geth %s --dev (1s blocks, %d gas per block), %d transfers per shape (the service's after a warm-up of %d); PostgreSQL: %s\n",
		version, blockGasLimit, o.transfers, o.warmup, pg.Source)
	if len(o.overrides) > 0 {
		fmt.Printf("    service configuration set for the run: %v\n", o.overrides)
	}
	if o.batch > 1 {
		fmt.Printf("    the service's creates go in batches of %d (POST /api/v1/tx:batch)\n", o.batch)
	}

	// Keys: for each shape, a set for the baseline and a set for the service.
	total := 0
	for _, n := range o.shapes {
		total += 2 * n
	}
	keys := e2e.Keys(total)
	amount := new(big.Int).Mul(big.NewInt(100), big.NewInt(params.Ether))
	if err := e2e.FundAccounts(ctx, geth.URL(), e2e.Addresses(keys), amount); err != nil {
		return nil, err
	}
	var profiler *nodeProfiler
	if o.nodeProfile {
		profiler = &nodeProfiler{url: geth.URL(), dir: root}
	}
	var results []result
	for _, n := range o.shapes {
		baselineKeys, serviceKeys := keys[:n], keys[n:2*n]
		keys = keys[2*n:]
		res := result{signers: n}
		fmt.Printf("==> %d signer(s): baseline\n", n)
		if res.baseline, err = runBaseline(ctx, geth.URL(), geth.PID(), baselineKeys, o.transfers, o.confirmations, profiler.start); err != nil {
			return results, fmt.Errorf("baseline, %d signers: %w", n, err)
		}
		fmt.Printf("==> %d signer(s): service\n", n)
		if res.service, err = runService(ctx, serviceRun{
			bin: serviceBin, dir: filepath.Join(root, fmt.Sprintf("service-%d", n)), pg: pg, nodeURL: geth.URL(),
			keys: serviceKeys, transfers: o.transfers, warmup: o.warmup, clients: o.clients, batch: o.batch, confirmations: o.confirmations, verbose: o.verbose,
			gethPID: geth.PID(), overrides: o.overrides, profileNode: profiler.start,
		}); err != nil {
			return results, fmt.Errorf("service, %d signers: %w", n, err)
		}
		results = append(results, res)
	}
	return results, nil
}

// blockGasLimit holds 40,000 transfers: block space is never what the run measures.
const blockGasLimit = 840_000_000

// roomyNode is geth's configuration for the run: blocks and a transaction pool that hold
// the whole run, so the node takes transfers as fast as it can process them.
func roomyNode(transfers int) []string {
	slots := fmt.Sprint(2 * transfers)
	return []string{
		"--dev.gaslimit", fmt.Sprint(blockGasLimit), "--miner.gaslimit", fmt.Sprint(blockGasLimit),
		"--txpool.accountslots", slots, "--txpool.globalslots", slots,
		"--txpool.accountqueue", slots, "--txpool.globalqueue", slots,
		"--rpc.batch-request-limit", "5000", "--rpc.batch-response-max-size", "100000000",
	}
}

// printResults writes each shape's baseline and service figures and how the service's time
// to confirm all compares with target times the baseline's.
func printResults(w io.Writer, results []result, target float64) {
	if len(results) == 0 {
		return
	}
	fmt.Fprintf(w, "\n%-8s  %-10s %12s %14s %8s %10s\n", "signers", "run", "accepted", "all confirmed", "blocks", "txs/s")
	for _, r := range results {
		for _, m := range []struct {
			name string
			m    measurement
		}{{"baseline", r.baseline}, {"service", r.service}} {
			fmt.Fprintf(w, "%-8d  %-10s %12s %14s %8d %10.0f\n", r.signers, m.name, m.m.accepted.Round(time.Millisecond),
				m.m.confirmed.Round(time.Millisecond), m.m.blocks, m.m.perSecond())
		}
		ratio := r.service.confirmed.Seconds() / r.baseline.confirmed.Seconds()
		verdict := "within target"
		if ratio > target {
			verdict = "ABOVE target"
		}
		fmt.Fprintf(w, "%-8d  service / baseline = %.2fx (target <= %.1fx: %s)\n", r.signers, ratio, target, verdict)
		service, database := r.service.cpu.Seconds("service"), r.service.cpu.Database
		ours := r.service.perTransferMillis(service + database)
		geth := r.baseline.perTransferMillis(r.baseline.cpu.Seconds("geth"))
		costRatio := 0.0
		if geth > 0 {
			costRatio = ours / geth
		}
		fmt.Fprintf(w, "%-8d  CPU per confirmed transfer: service %.3f ms + database %.3f ms = %.3f ms; geth in the baseline %.3f ms; ratio %.2f\n",
			r.signers, r.service.perTransferMillis(service), r.service.perTransferMillis(database), ours, geth, costRatio)
	}
}
