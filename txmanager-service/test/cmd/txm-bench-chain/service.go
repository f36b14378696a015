package main

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/rpc"
	"github.com/jackc/pgx/v5"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/test/diskprobe"
	"github.com/bionicotaku/txmanager-service/test/e2e"
	"github.com/bionicotaku/txmanager-service/test/procstat"
	"github.com/bionicotaku/txmanager-service/test/runcost"
)

type serviceRun struct {
	bin, dir  string
	pg        *e2e.Postgres
	nodeURL   string
	keys      []*ecdsa.PrivateKey
	transfers int
	warmup    int
	clients   int
	// batch > 1 sends the creates in batches of that many (POST /api/v1/tx:batch).
	batch         int
	confirmations uint64
	verbose       bool
	gethPID       int
	overrides     map[string]any
	// profileNode profiles geth over the measured run (nodeProfiler.start).
	profileNode func(context.Context, string) func()
}

// runService starts the service on a fresh database with keys as its signers, creates the
// transfers through its HTTP API from r.clients concurrent clients (round robin over the
// signers, with a gas limit as the baseline has), and measures first create -> every
// transaction CONFIRMED.
func runService(ctx context.Context, r serviceRun) (measurement, error) {
	db, err := r.pg.CreateDatabase(ctx, "txm_bench_chain")
	if err != nil {
		return measurement{}, err
	}
	defer func() { _ = db.Drop(context.WithoutCancel(ctx)) }()
	cfg := e2e.FastLoops(e2e.ServiceConfig{NodeID: "bench-chain", DatabaseDSN: db.DSN, ChainRPCURL: r.nodeURL, Signers: r.keys})
	cfg.Confirmations = r.confirmations
	// Profiles on /debug/pprof/ let a slow run be looked into while it happens.
	cfg.Overrides = map[string]any{"observability.pprof": true}
	for key, value := range r.overrides {
		cfg.Overrides[key] = value
	}
	svc, err := e2e.StartService(ctx, e2e.ServiceOptions{Bin: r.bin, Config: cfg, Dir: r.dir})
	if err != nil {
		return measurement{}, err
	}
	defer func() { _ = svc.Stop() }()
	conn, err := pgx.Connect(ctx, db.DSN)
	if err != nil {
		return measurement{}, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	api := e2e.NewClient(svc.HTTPURL())
	fmt.Printf("    service at %s (profiles: %s/debug/pprof/)\n", svc.HTTPURL(), svc.HTTPURL())
	signers := e2e.Addresses(r.keys)
	if r.warmup > 0 {
		if err := warmUp(ctx, conn, api, signers, r.warmup, r.clients, r.batch); err != nil {
			return measurement{}, fmt.Errorf("warm-up: %w", err)
		}
	}
	before, err := runcost.StartDatabaseCount(ctx, conn)
	if err != nil {
		return measurement{}, err
	}

	profileDir := r.dir + "-profiles"
	if err := os.MkdirAll(profileDir, 0o755); err != nil {
		return measurement{}, err
	}
	// Taken before the CPU account starts: writing the profile is not the run's work.
	allocStart, allocStartErr := allocationsSince(ctx, svc.HTTPURL(), profileDir, "allocs-start")
	account := runcost.StartCPUAccount(runcost.Process{Name: "service", PID: svc.PID()}, runcost.Process{Name: "geth", PID: r.gethPID},
		runcost.Process{Name: "load generator", PID: os.Getpid()})
	account.SampleBackends(ctx, conn)
	disk, err := diskprobe.ForDatabase(ctx, conn)
	if err != nil {
		fmt.Printf("    disk probe skipped: %v\n", err)
	}
	defer disk.Finish()
	profile := startProfile(ctx, svc.HTTPURL(), profileDir)
	stopNodeProfile := r.profileNode(ctx, fmt.Sprintf("service-%d", len(r.keys)))
	started := time.Now()
	if err := createAll(ctx, api, signers, r.transfers, r.clients, r.batch, measuredPrefix); err != nil {
		return measurement{}, err
	}
	m := measurement{transfers: r.transfers, accepted: time.Since(started)}
	lastReport := time.Now()
	err = waitAllConfirmed(ctx, conn, measuredPrefix, r.transfers, func() {
		if r.verbose && time.Since(lastReport) >= time.Second {
			lastReport = time.Now()
			var allocated, broadcast, mined, final int
			if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'ALLOCATED'), count(*) FILTER (WHERE state IN ('TRACKING', 'STUCK') AND receipt IS NULL),
				count(*) FILTER (WHERE state IN ('TRACKING', 'STUCK') AND receipt IS NOT NULL), count(*) FILTER (WHERE state = 'CONFIRMED') FROM managed_tx`).Scan(&allocated, &broadcast, &mined, &final); err == nil {
				pool := poolStatus(ctx, r.nodeURL)
				fmt.Printf("    %5.1fs  allocated %d, broadcast %d, mined %d, confirmed %d; node pool %s\n", time.Since(started).Seconds(), allocated, broadcast, mined, final, pool)
			}
		}
		account.SampleBackends(ctx, conn)
	})
	if err != nil {
		return m, err
	}
	m.confirmed = time.Since(started)
	m.cpu = account.Finish()
	fmt.Printf("    %s\n", m.cpu)
	if flushes, ok := disk.Finish(); ok {
		// Every commit waits for a WAL flush: a run that met a stalled disk waited with it.
		fmt.Printf("    %s\n", flushes)
	}
	if peak, err := (procstat.Proc{}).PeakResidentBytes(svc.PID()); err == nil {
		fmt.Printf("    service peak resident memory %d MiB\n", peak>>20)
	}
	stopNodeProfile()
	profiles, profileErr := profile.stop()
	allocEnd, allocEndErr := allocationsSince(ctx, svc.HTTPURL(), profileDir, "allocs-end")
	if err := conn.QueryRow(ctx, "SELECT count(DISTINCT block_number) FROM managed_tx WHERE request_id LIKE $1", measuredPrefix+"%").Scan(&m.blocks); err != nil {
		return m, err
	}
	// The service's backends flush their table counters when they exit: stop it before
	// reading them. Its statements after the last confirmation (idle polls) count too.
	if err := svc.Stop(); err != nil {
		return m, fmt.Errorf("stop the service: %w", err)
	}
	if err := runcost.WaitForOtherBackends(ctx, conn, 10*time.Second); err != nil {
		return m, err
	}
	after, err := runcost.TakeDatabaseSnapshot(ctx, conn)
	if err != nil {
		return m, err
	}
	statements, err := runcost.CountStatements(ctx, conn, topStatements)
	if err != nil {
		return m, err
	}
	runcost.PrintDatabaseCost(os.Stdout, runcost.DatabaseCost{Transfers: r.transfers, Delta: after.Minus(before), Statements: statements})
	printProfile(ctx, profiles, profileErr)
	printAllocations(ctx, allocStart, allocEnd, errors.Join(allocStartErr, allocEndErr))
	return m, nil
}

// topStatements and topFunctions are how many entries the costliest statements and the
// service's profile print.
const (
	topStatements = 12
	topFunctions  = 25
)

// printProfile writes the top of the service's CPU profile over the run, by own time and
// by time with callees.
func printProfile(ctx context.Context, files []string, err error) {
	if err != nil {
		fmt.Printf("    service CPU profile: %v\n", err)
	}
	runcost.PrintProfileTops(ctx, os.Stdout, "service CPU profile", fmt.Sprintf(", %d profiles of %ds", len(files), profileChunkSeconds), files, topFunctions)
}

// printAllocations writes the top of what the service allocated during the run, by bytes:
// what its garbage collector then has to clear (mallocgc and the collector's own work were
// a fifth of its CPU with batches of creates on 2026-11-30).
func printAllocations(ctx context.Context, start, end string, err error) {
	if err != nil {
		fmt.Printf("    service allocations: %v\n", err)
		return
	}
	runcost.PrintAllocationTop(ctx, os.Stdout, "service allocations during the run (bytes, by own allocation)", start, end, topFunctions)
}

// poolStatus is the node's transaction pool as "pending/queued", for the progress lines.
func poolStatus(ctx context.Context, url string) string {
	client, err := rpc.DialContext(ctx, url)
	if err != nil {
		return err.Error()
	}
	defer client.Close()
	var status struct{ Pending, Queued hexutil.Uint }
	if err := client.CallContext(ctx, &status, "txpool_status"); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("%d pending / %d queued", status.Pending, status.Queued)
}

// Request ids of the measured run and of the warm-up before it.
const (
	measuredPrefix = "bench-"
	warmupPrefix   = "warmup-"
)

// warmUp gives the database what one in service has before the measured run: n transfers
// created and confirmed, then VACUUM (ANALYZE), so the plans the service's statements get are made
// with statistics (ANALYZE invalidates the ones cached before). The table counters the
// service's backends have not flushed yet (they flush at most once a second while busy)
// are left time to land before the count starts.
func warmUp(ctx context.Context, conn *pgx.Conn, api *e2e.Client, signers []common.Address, n, clients, batch int) error {
	started := time.Now()
	if err := createAll(ctx, api, signers, n, clients, batch, warmupPrefix); err != nil {
		return err
	}
	if err := waitAllConfirmed(ctx, conn, warmupPrefix, n, func() {}); err != nil {
		return err
	}
	// VACUUM too, or autovacuum cleans the warm-up's dead row versions during the measured
	// run and its CPU and WAL count there; a checkpoint, so none falls due in it by chance.
	for _, sql := range []string{"VACUUM (ANALYZE)", "CHECKPOINT"} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			return fmt.Errorf("%s: %w", sql, err)
		}
	}
	fmt.Printf("    warm-up: %d transfers confirmed in %s, then VACUUM (ANALYZE) and CHECKPOINT\n", n, time.Since(started).Round(time.Millisecond))
	return sleep(ctx, 2*time.Second)
}

// createAll creates n transfers through the API from clients concurrent callers, round
// robin over the signers, with request ids prefix<i>. With batch > 1 each caller sends
// batches of that many creates, and clients/batch callers (at least 4) send them: the same
// number of creates in flight as a payout run's few bulk callers have.
func createAll(ctx context.Context, api *e2e.Client, signers []common.Address, n, clients, batch int, prefix string) error {
	var (
		next   atomic.Int64
		failed atomic.Pointer[error]
		wg     sync.WaitGroup
	)
	create := func(i int) *v1.CreateTxRequest {
		return &v1.CreateTxRequest{Signer: signers[i%len(signers)].Hex(), To: e2e.Recipient().Hex(), Value: "1", GasLimit: 21_000, RequestId: fmt.Sprintf("%s%d", prefix, i)}
	}
	step := max(batch, 1)
	if step > 1 {
		clients = max(4, clients/step)
	}
	for range clients {
		wg.Go(func() {
			for {
				first := int(next.Add(int64(step))) - step
				if first >= n || failed.Load() != nil {
					return
				}
				var err error
				if step == 1 {
					if _, err = api.CreateTx(ctx, create(first)); err != nil {
						err = fmt.Errorf("create %s%d: %w", prefix, first, err)
					}
				} else {
					err = createBatch(ctx, api, create, first, min(first+step, n))
				}
				if err != nil {
					failed.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	if errp := failed.Load(); errp != nil {
		return *errp
	}
	return nil
}

// createBatch creates transfers [from, to) in one batch call; a create the batch refused
// is an error of the run.
func createBatch(ctx context.Context, api *e2e.Client, create func(int) *v1.CreateTxRequest, from, to int) error {
	reqs := make([]*v1.CreateTxRequest, 0, to-from)
	for i := from; i < to; i++ {
		reqs = append(reqs, create(i))
	}
	resp, err := api.CreateTxBatch(ctx, reqs)
	if err != nil {
		return fmt.Errorf("batch of creates %d-%d: %w", from, to-1, err)
	}
	for j, r := range resp.GetResults() {
		if e := r.GetError(); e != nil {
			return fmt.Errorf("create %s refused in its batch: %s %s", reqs[j].GetRequestId(), e.GetReason(), e.GetMessage())
		}
	}
	return nil
}

// waitAllConfirmed waits until the n transfers with request ids starting with prefix are
// CONFIRMED, calling each before every look; a FAILED_FINAL one ends the wait.
//
// The service, its database and this tool share two cores, so the look itself must stay
// cheap: the baseline only asks the node when the head moves. Counting the transfers by
// request id reads the whole table (13 ms a look at 22,000 rows, about 0.6 CPU-seconds of
// a run the service did not spend). Each tick counts only the transactions not yet final,
// through the partial index that holds them, and the full count runs when none are left
// or every fullCountEvery, which still ends the wait within seconds of a FAILED_FINAL.
func waitAllConfirmed(ctx context.Context, conn *pgx.Conn, prefix string, n int, each func()) error {
	lastFull := time.Now()
	open := n
	for {
		each()
		counted, err := countOpen(ctx, conn)
		if err != nil && ctx.Err() != nil {
			// The wait ran out during the count: say what was still open at the last one.
			return errors.Join(fmt.Errorf("%d transactions not final", open), err)
		}
		if err != nil {
			return err
		}
		open = counted
		if open == 0 || time.Since(lastFull) >= fullCountEvery {
			lastFull = time.Now()
			confirmed, failedFinal, err := countFinal(ctx, conn, prefix)
			switch {
			case err != nil && ctx.Err() != nil:
				return errors.Join(fmt.Errorf("%d transactions not final", open), err)
			case err != nil:
				return err
			case failedFinal > 0:
				return fmt.Errorf("%d transactions FAILED_FINAL", failedFinal)
			case confirmed == n:
				return nil
			case open == 0:
				return fmt.Errorf("nothing left open, but %d of %d transfers confirmed", confirmed, n)
			}
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			return errors.Join(fmt.Errorf("%d transactions not final", open), err)
		}
	}
}

// fullCountEvery is how often waitAllConfirmed counts the transfers by request id while
// some are still open.
const fullCountEvery = 5 * time.Second

// countOpen counts the transactions not final yet (of any request id: the tool's database
// holds only its own).
func countOpen(ctx context.Context, conn *pgx.Conn) (open int, err error) {
	err = conn.QueryRow(ctx, `SELECT count(*) FROM managed_tx WHERE confirmed_at IS NULL`).Scan(&open)
	return open, err
}

// countFinal counts the transfers with request ids starting with prefix that are CONFIRMED
// and FAILED_FINAL.
func countFinal(ctx context.Context, conn *pgx.Conn, prefix string) (confirmed, failedFinal int, err error) {
	err = conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'CONFIRMED'), count(*) FILTER (WHERE state = 'FAILED_FINAL')
		FROM managed_tx WHERE request_id LIKE $1`, prefix+"%").Scan(&confirmed, &failedFinal)
	return confirmed, failedFinal, err
}
