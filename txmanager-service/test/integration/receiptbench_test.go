package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/jackc/pgx/v5"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/test/e2e"
	"github.com/bionicotaku/txmanager-service/test/loadgen"
	"github.com/bionicotaku/txmanager-service/test/procstat"
	"github.com/bionicotaku/txmanager-service/test/runcost"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// receiptCountingProxy forwards JSON-RPC and counts the requests that read receipts, by
// hash (eth_getTransactionReceipt, many in a batch request) or a block's whole
// (eth_getBlockReceipts), and the reads of each kind inside them.
type receiptCountingProxy struct {
	target     string
	requests   atomic.Int64
	lookups    atomic.Int64
	blockReads atomic.Int64
}

func (p *receiptCountingProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	lookups, blocks := strings.Count(string(body), "eth_getTransactionReceipt"), strings.Count(string(body), "eth_getBlockReceipts")
	if lookups+blocks > 0 {
		p.requests.Add(1)
		p.lookups.Add(int64(lookups))
		p.blockReads.Add(int64(blocks))
	}
	e2e.ForwardJSONRPC(w, r, p.target, body, nil)
}

// receiptReads are the proxy's counts at one moment.
type receiptReads struct{ requests, lookups, blocks int64 }

func (p *receiptCountingProxy) reads() receiptReads {
	return receiptReads{p.requests.Load(), p.lookups.Load(), p.blockReads.Load()}
}

func (r receiptReads) minus(o receiptReads) receiptReads {
	return receiptReads{r.requests - o.requests, r.lookups - o.lookups, r.blocks - o.blocks}
}

// BenchmarkReceiptPipeline is issue 4's receipt figure: 10,000 transactions in flight from
// 10 signers; once their blocks (and the confirmation blocks) are mined, how long until all
// 10,000 are CONFIRMED, and how many JSON-RPC requests the receipt look-ups cost per 1,000
// receipts checked (target: at most 20, through batching).
//
// The chain is a txm-devchain process of its own that seals a block when told, so the
// chain's CPU (its transaction pool, block building, receipt look-ups) is counted apart from
// this process's, which is the service's: both are reported per transaction, for the
// create-and-broadcast phase (this process also runs the load generator and the counting
// proxy then) and for the receipt phase (after mining; nothing but the service and the proxy
// forwarding its receipt look-ups).
//
// What the database did is counted as bench-chain counts it (package runcost), over the whole
// run from the first create to the last CONFIRMED, per confirmed transfer: statements, row
// versions written and left dead, WAL bytes and the database's CPU, with the costliest
// statements; and the top of this process's CPU profile over the same span. Counting
// statements needs pg_stat_statements preloaded, so the benchmark runs a PostgreSQL cluster
// of its own.
func BenchmarkReceiptPipeline(b *testing.B) {
	const signers, perSigner = 10, 1000
	const total = signers * perSigner
	devChain := startBenchDevChain(b, signers+1)
	keys, err := chain.DevKeys(signers + 1)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	client, err := ethclient.DialContext(ctx, devChain.URL())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(client.Close)
	seal := func() {
		if err := devChain.Seal(ctx); err != nil {
			b.Fatal(err)
		}
	}
	seal()
	proxy := &receiptCountingProxy{target: devChain.URL()}
	front := httptest.NewServer(proxy)
	b.Cleanup(front.Close)
	dsn := startCountedDatabase(b)
	s := startService(b, serviceOptions{dsn: dsn, configure: func(bc *conf.Bootstrap) {
		bc.Chain.RPCURL = front.URL
		bc.Signers.RawKeys = nil
		for _, key := range keys[:signers] {
			bc.Signers.RawKeys = append(bc.Signers.RawKeys, hexutil.Encode(crypto.FromECDSA(key)))
		}
		fast := conf.Duration(200 * time.Millisecond)
		bc.Pipeline.SubmitInterval, bc.Pipeline.FinalityInterval, bc.Pipeline.Receipts.PollInterval = fast, fast, fast
		bc.Resubmit.Interval = conf.Duration(10 * time.Minute) // nothing is lost here; keep rebroadcasts out of the figure
		bc.Confirmations.Required = 3
	}})
	addresses := make([]common.Address, len(keys))
	for i, key := range keys {
		addresses[i] = crypto.PubkeyToAddress(key.PublicKey)
	}
	recipient := addresses[signers].Hex()
	// The benchmark's own queries go through conn, which pg_stat_statements leaves out.
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close(context.Background()) })
	countConfirmed := func() int {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM managed_tx WHERE state = 'CONFIRMED'").Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}
	dbBefore, err := runcost.StartDatabaseCount(ctx, conn)
	if err != nil {
		b.Fatal(err)
	}
	account := runcost.StartCPUAccount(runcost.Process{Name: "this process (service, load generator, proxy)", PID: os.Getpid()},
		runcost.Process{Name: "chain process", PID: devChain.PID()})
	account.SampleBackends(ctx, conn)
	// The samples run in this process, inside its measured CPU: a few a second are enough.
	var lastSample time.Time
	sampleBackends := func() {
		if time.Since(lastSample) >= 200*time.Millisecond {
			account.SampleBackends(ctx, conn)
			lastSample = time.Now()
		}
	}
	profile := startOwnProfile(b)
	runs := 0

	for b.Loop() {
		runs++
		started := time.Now()
		readsAtStart := proxy.reads()
		createCPU := startCPUMeter(b, devChain.PID())
		res := loadgen.Run(ctx, loadgen.NewClient(64), loadgen.Config{
			URL: s.httpURL + "/api/v1/tx", Concurrency: 64, Requests: total,
			Body: func(i int) []byte {
				body, _ := json.Marshal(map[string]any{"signer": addresses[i%signers].Hex(), "to": recipient, "value": fmt.Sprint(i + 1), "gasLimit": 21000})
				return body
			},
		})
		if res.Failures > 0 {
			b.Fatalf("creates failed: %s", res.FirstFail)
		}
		waitFor(b, 2*time.Minute, "all broadcast", func() bool {
			// A first send the node accepts is not written (the rows stay SIGNED): the
			// node's pool says when every transaction is in.
			inPool := 0
			for _, addr := range addresses[:signers] {
				if n, err := client.PendingNonceAt(ctx, addr); err == nil {
					inPool += int(n)
				}
			}
			sampleBackends()
			if inPool >= runs*total {
				return true
			}
			var summary string
			_ = conn.QueryRow(ctx, `SELECT string_agg(state || '/' || coalesce(sub_state, '') || '=' || n, ', ')
				FROM (SELECT state, sub_state, count(*) n FROM managed_tx GROUP BY 1, 2) t`).Scan(&summary)
			b.Logf("waiting: %s", summary)
			time.Sleep(2 * time.Second)
			return false
		})
		createService, createChain := createCPU.seconds(b)
		b.Logf("10,000 created and broadcast in %s", time.Since(started).Round(time.Millisecond))

		// Mine everything, then the confirmation blocks, and only then start the clock.
		for mined := 0; mined < 200; mined++ {
			seal()
			done := true
			for _, addr := range addresses[:signers] {
				if n, err := client.NonceAt(ctx, addr, nil); err != nil || n < uint64(runs*perSigner) {
					done = false
					break
				}
			}
			if done {
				break
			}
		}
		for range 3 {
			seal()
		}
		readsBeforeFinal := proxy.reads()
		minedAt := time.Now()
		steal := startStealMeter()
		receiptCPU := startCPUMeter(b, devChain.PID())
		waitFor(b, 5*time.Minute, "all confirmed", func() bool {
			sampleBackends()
			return countConfirmed() == runs*total
		})
		finalAfter := time.Since(minedAt)
		receiptService, receiptChain := receiptCPU.seconds(b)
		steal.report(b)
		reads := proxy.reads().minus(readsAtStart)
		b.ReportMetric(finalAfter.Seconds(), "s-to-final-10k")
		// Every transaction's receipt is checked once it is mined: requests per 1,000 of
		// them, whether the checker looked them up by hash or read their blocks whole.
		b.ReportMetric(float64(reads.requests)*1000/float64(total), "rpc-req/1000-receipts")
		perTx := func(seconds float64) float64 { return seconds * 1000 / total }
		b.ReportMetric(perTx(createService), "service-create-cpu-ms/tx")
		b.ReportMetric(perTx(createChain), "chain-create-cpu-ms/tx")
		b.ReportMetric(perTx(receiptService), "service-receipt-cpu-ms/tx")
		b.ReportMetric(perTx(receiptChain), "chain-receipt-cpu-ms/tx")
		b.Logf("final %s after mining; receipts read in %d requests (%d after mining): %d looked up by hash, %d blocks read whole",
			finalAfter.Round(time.Millisecond), reads.requests, proxy.reads().minus(readsBeforeFinal).requests, reads.lookups, reads.blocks)
		b.Logf("CPU, create and broadcast: this process (service, load generator, proxy) %.2f s, chain process %.2f s", createService, createChain)
		b.Logf("CPU, receipts to final: this process (service, proxy) %.2f s, chain process %.2f s", receiptService, receiptChain)
	}
	profiles := profile.stop()
	cpu := account.Finish() // before the service stops: its server processes are gone after
	// A server process flushes its table counters when it exits: the service stops, and its
	// connections' processes end, before the counters are read.
	s.stop(b)
	if err := runcost.WaitForOtherBackends(ctx, conn, 10*time.Second); err != nil {
		b.Fatal(err)
	}
	reportDatabaseCost(b, conn, dbBefore, runs*total, cpu)
	runcost.PrintProfileTops(ctx, os.Stdout, "this process's CPU profile (service, load generator, proxy)", "", profiles, 20)
}

// startCountedDatabase starts a PostgreSQL cluster of the benchmark's own with
// pg_stat_statements preloaded (runcost.PostgresSettings), stopped when b ends, and returns
// the DSN of a migrated database in it.
func startCountedDatabase(b *testing.B) string {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pg, err := e2e.StartPostgres(ctx, runcost.PostgresSettings...)
	if err != nil {
		b.Fatalf("start PostgreSQL with pg_stat_statements: %v", err)
	}
	b.Cleanup(func() { _ = pg.Close() })
	db, err := pg.CreateDatabase(ctx, "receipt_pipeline")
	if err != nil {
		b.Fatal(err)
	}
	if err := testsupport.Migrate(ctx, db.DSN); err != nil {
		b.Fatal(err)
	}
	return db.DSN
}

// reportDatabaseCost logs what the database did since before for transfers confirmed
// transfers, and reports it per transfer with the database's CPU from cpu.
func reportDatabaseCost(b *testing.B, conn *pgx.Conn, before runcost.DatabaseSnapshot, transfers int, cpu runcost.CPUReport) {
	b.Helper()
	ctx := context.Background()
	after, err := runcost.TakeDatabaseSnapshot(ctx, conn)
	if err != nil {
		b.Fatal(err)
	}
	statements, err := runcost.CountStatements(ctx, conn, 8)
	if err != nil {
		b.Fatal(err)
	}
	cost := runcost.DatabaseCost{Transfers: transfers, Delta: after.Minus(before), Statements: statements}
	// On stdout: a benchmark's log is cut to ten lines unless the run is verbose.
	fmt.Printf("BenchmarkReceiptPipeline, first create to all confirmed:\n    %s\n", cpu)
	runcost.PrintDatabaseCost(os.Stdout, cost)
	per := cost.PerTransfer()
	b.ReportMetric(cpu.Database*1000/float64(transfers), "db-cpu-ms/tx")
	b.ReportMetric(per.Statements, "statements/tx")
	b.ReportMetric(per.DeadRowVersions, "dead-rows/tx")
	b.ReportMetric(per.WALBytes, "wal-bytes/tx")
}

// ownProfile is this process's CPU profile over a benchmark's measured span, in a file.
type ownProfile struct {
	file string
	once sync.Once
}

// startOwnProfile starts profiling this process until stop, or until b ends when it fails
// first (a profile left running would make the next one in this binary fail to start). A
// test binary already profiling (-cpuprofile) keeps its own, and nothing is printed.
func startOwnProfile(b *testing.B) *ownProfile {
	b.Helper()
	file := filepath.Join(b.TempDir(), "cpu.pprof")
	out, err := os.Create(file)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(out); err != nil {
		_ = out.Close()
		b.Logf("CPU profile not taken: %v", err)
		return &ownProfile{}
	}
	p := &ownProfile{file: file}
	// Cleanups run last first: the profile stops before its file closes.
	b.Cleanup(func() { _ = out.Close() })
	b.Cleanup(func() { p.stop() })
	return p
}

// stop ends the profile and returns its file, if one was taken; later calls do nothing more.
func (p *ownProfile) stop() []string {
	if p.file == "" {
		return nil
	}
	p.once.Do(pprof.StopCPUProfile)
	return []string{p.file}
}

// startBenchDevChain builds txm-devchain and starts it, sealing blocks only when told, as a
// child of this process on a port the kernel picks; it is stopped when b ends.
func startBenchDevChain(b *testing.B, accounts int) *e2e.ChainNode {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// This package's folder is test/integration of the service module.
	bin, err := e2e.BuildDevChain(ctx, filepath.Join("..", ".."), b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	node, err := e2e.StartDevChain(ctx, e2e.DevChainOptions{Bin: bin, Accounts: accounts, SealOnDemand: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := node.Stop(); err != nil {
			b.Errorf("txm-devchain: %v", err)
		}
	})
	return node
}

// cpuMeter is the CPU time this process and a child used since it started.
type cpuMeter struct {
	child              int
	selfStart, chStart float64
}

func startCPUMeter(b *testing.B, child int) cpuMeter {
	b.Helper()
	m := cpuMeter{child: child}
	m.selfStart, m.chStart = processSeconds(b, os.Getpid()), processSeconds(b, child)
	return m
}

// seconds is the CPU time (user and system) this process and the child used since start.
func (m cpuMeter) seconds(b *testing.B) (self, child float64) {
	b.Helper()
	return processSeconds(b, os.Getpid()) - m.selfStart, processSeconds(b, m.child) - m.chStart
}

func processSeconds(b *testing.B, pid int) float64 {
	b.Helper()
	seconds, err := procstat.ProcessSeconds(pid)
	if err != nil {
		b.Fatal(err)
	}
	return seconds
}
