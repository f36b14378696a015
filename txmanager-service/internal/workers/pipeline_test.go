package workers_test

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/params"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/lingo-utils/txmanager"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/receipts"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/reconcile"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/stuck"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/submitting"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/signer"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/internal/workers"
	"github.com/bionicotaku/txmanager-service/internal/writer"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// chainID is the embedded chain's id, under which the repositories write.
var chainID = testsupport.TestChain()

// pipelineNode is one node's chain pipeline assembled as the service assembles it (the
// app's newChainStack): real stages on a real database and the embedded chain, driven by
// the loops under test, and a writer that announces what it allocates to them.
type pipelineNode struct {
	pool      *pgxpool.Pool
	sim       *chain.SimulatedChain
	key       *ecdsa.PrivateKey
	signer    common.Address
	leases    *services.LeaseManager
	allocator *writer.Allocator
	pipeline  *workers.PipelineWorkers
	feed      *workers.FeedSequencerLoop
}

type pipelineOptions struct {
	// recoverByIntent: a quarantined signer is recovered and released by the pipeline.
	recoverByIntent bool
	// stuckScan paces the stuck loop (and reconciliation with it) when nothing wakes it.
	stuckScan time.Duration
}

func newPipelineNode(t *testing.T, pool *pgxpool.Pool, sim *chain.SimulatedChain, opts pipelineOptions) *pipelineNode {
	t.Helper()
	logger, metrics, clock := testLogger(), telemetry.Noop(), services.SystemClock{}
	component, err := txmanager.NewComponentWithDependencies(txmanager.Config{}, pool, txmanager.Dependencies{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	key := sim.DevKeys()[0]
	keys, err := signer.NewRawKeySource(conf.EnvironmentDevelopment, nil, []*ecdsa.PrivateKey{key})
	if err != nil {
		t.Fatal(err)
	}
	watch, err := repositories.NewServerWatch(logger, metrics)
	if err != nil {
		t.Fatal(err)
	}
	leases := services.NewLeaseManager(services.LeaseConfig{Node: "pipeline-node", Duration: 10 * time.Second, RenewInterval: 3 * time.Second, Skew: time.Second,
		IdleTimeout: time.Minute, NotLeaderRetryAfter: time.Second}, repositories.NewLeaseRepository(pool, chainID), clock, metrics, logger)
	fees := services.FeePolicy{BumpPercent: 12, BaseFeeMultiplier: 2}
	attempts := repositories.NewAttemptRepository(pool, chainID)
	txSigner := pipeline.NewSigner(chainID, keys)
	broadcaster := pipeline.NewBroadcaster(sim, attempts, leases, metrics, logger)
	submitter := submitting.New(submitting.Config{Batch: 64, SignConcurrency: 4, ResubmitInterval: time.Second, Fees: fees},
		repositories.NewSubmittingRepository(pool, chainID), sim, txSigner, broadcaster, leases, watch, nil, metrics, logger)
	tracker := receipts.New(receipts.Config{Confirmations: 2}, repositories.NewReceiptRepository(pool, chainID), sim, leases, metrics, logger)
	schedule := receipts.NewSchedule(receipts.ScheduleConfig{PollInterval: 50 * time.Millisecond, Workers: 2, BatchSize: 100, MaxBackoff: time.Second}, tracker, logger)
	resolver := stuck.New(stuck.Config{MinAge: time.Hour, MinAttempts: 3, ResubmitInterval: time.Second, Fees: fees}, repositories.NewStuckRepository(pool, chainID),
		attempts, sim, txSigner, broadcaster, leases, stuck.PolicyHook{Action: domain.ActionNoop}, nil, clock, metrics, logger)
	reconciler, err := reconcile.New(reconcile.Config{ScanBlocks: 256, Confirmations: 2, ResubmitInterval: time.Second, RecoverByIntent: opts.recoverByIntent,
		AdoptionWindow: time.Hour, HoleGrace: time.Hour}, repositories.NewReconcileRepository(pool, chainID), attempts, sim, leases, clock, metrics, logger)
	if err != nil {
		t.Fatal(err)
	}
	open, err := services.NewOpenSigners(repositories.NewOpenSignerRepository(pool, chainID), leases, signerList{}, metrics, logger)
	if err != nil {
		t.Fatal(err)
	}
	sequencer, err := services.NewFeedSequencer(component.Manager, repositories.NewCompletionRepository(pool), services.NewFeedNotifier(), metrics)
	if err != nil {
		t.Fatal(err)
	}
	feed := workers.NewFeedSequencerLoop(loopConfig(50*time.Millisecond), sequencer, logger)
	fast := 50 * time.Millisecond
	stuckScan := opts.stuckScan
	if stuckScan == 0 {
		stuckScan = fast
	}
	loops := workers.NewPipelineWorkers(workers.PipelineConfig{SubmitInterval: fast, FinalityInterval: fast, ResubmitScan: fast, ResubmitBatch: 256, StuckScan: stuckScan,
		AdoptInterval: fast, SignerConcurrency: 4},
		workers.PipelineStages{Submitting: submitter, Receipts: tracker, Schedule: schedule, Stuck: resolver, Reconcile: reconciler, Open: open}, leases, feed, logger)
	// The chain is asked at every batch (StateTimeout 1ns), so a chain ahead of the database
	// is noticed by the writer and not only by reconciliation.
	allocator := writer.NewAllocator(component.Manager, repositories.NewAllocationRepository(chainID), leases, sim, chainID, services.NewNonceCache(watch),
		writer.NonceConfig{ChainQuery: true, StateTimeout: time.Nanosecond, RecoverByIntent: opts.recoverByIntent}, clock, loops, metrics, logger)
	return &pipelineNode{pool: pool, sim: sim, key: key, signer: crypto.PubkeyToAddress(key.PublicKey), leases: leases, allocator: allocator, pipeline: loops, feed: feed}
}

// newSimulated is an embedded chain sealing a block every 100 ms with one funded account.
func newSimulated(t *testing.T) *chain.SimulatedChain {
	t.Helper()
	sim, err := chain.NewSimulated(chain.SimulatedConfig{DevAccounts: 1, BlockInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	return sim
}

// start runs the node's loops until the test ends.
func (n *pipelineNode) start(t *testing.T) {
	t.Helper()
	n.feed.Start(context.Background())
	n.pipeline.Start(context.Background())
	t.Cleanup(func() {
		n.pipeline.Stop()
		n.feed.Stop()
	})
}

// allocate runs one writer batch of count self-transfers on the node and returns each
// create's answer.
func (n *pipelineNode) allocate(t *testing.T, count int) ([]domain.ManagedTx, []error) {
	t.Helper()
	ops := make([]*writer.Op, count)
	for i := range ops {
		ops[i] = writer.NewOp(t.Context(), domain.CreateRequest{Signer: n.signer, Intent: domain.Intent{To: &n.signer, Value: big.NewInt(int64(i + 1)), GasLimit: 21000}}, 21000)
	}
	n.allocator.AllocateBatch(t.Context(), ops)
	return testsupport.Results(t, ops)
}

// states reads the signer's rows as nonce -> state, and how many of them the feed has
// positioned.
func (n *pipelineNode) states(t *testing.T) (map[uint64]string, int) {
	t.Helper()
	rows, err := n.pool.Query(t.Context(), "SELECT nonce, state FROM managed_tx WHERE signer = $1", n.signer.Hex())
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	states := map[uint64]string{}
	for rows.Next() {
		var nonce int64
		var state string
		if err := rows.Scan(&nonce, &state); err != nil {
			t.Fatal(err)
		}
		states[uint64(nonce)] = state
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var positioned int
	if err := n.pool.QueryRow(t.Context(), "SELECT count(*) FROM tx_completions WHERE signer = $1 AND feed_position IS NOT NULL", n.signer.Hex()).Scan(&positioned); err != nil {
		t.Fatal(err)
	}
	return states, positioned
}

// allConfirmed: the signer has exactly nonces 0..count-1, every one CONFIRMED and in the
// feed.
func (n *pipelineNode) allConfirmed(t *testing.T, count int) bool {
	states, positioned := n.states(t)
	if len(states) != count || positioned != count {
		return false
	}
	for nonce := range uint64(count) {
		if states[nonce] != string(domain.StateConfirmed) {
			return false
		}
	}
	return true
}

// The loops alone take a signer's transactions to CONFIRMED and into the feed: those this
// node's writer allocated (it announces them to the submit loop), and those a node that went
// away left behind (the adopt loop takes the signer over, then submits them).
func TestPipelineWorkersDriveTransactionsToAFinalState(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// allocateElsewhere: another node allocates the transactions and lets its lease go
		// before this node starts; otherwise this node allocates them once running.
		allocateElsewhere bool
	}{
		{name: "allocated on this node", allocateElsewhere: false},
		{name: "left behind by a node that went away", allocateElsewhere: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool, sim := testsupport.MigratedPool(t), newSimulated(t)
			n := newPipelineNode(t, pool, sim, pipelineOptions{})
			const count = 3
			if tc.allocateElsewhere {
				gone := testsupport.NewWriterNode(t, pool, "gone", testsupport.WriterNodeOptions{})
				if _, errs := testsupport.Results(t, gone.Allocate(t, n.signer, count)); errors.Join(errs...) != nil {
					t.Fatal(errors.Join(errs...))
				}
				if err := gone.Leases.ReleaseAll(t.Context()); err != nil {
					t.Fatal(err)
				}
				n.start(t)
			} else {
				n.start(t)
				if _, errs := n.allocate(t, count); errors.Join(errs...) != nil {
					t.Fatal(errors.Join(errs...))
				}
			}
			waitFor(t, 20*time.Second, "every transaction CONFIRMED and in the feed", func() bool { return n.allConfirmed(t, count) })
			if _, held := n.leases.Current(n.signer.Hex()); !held {
				t.Fatal("the node drove the signer without holding its lease")
			}
		})
	}
}

// A signer the chain is ahead of is quarantined by the writer, and the loops recover it
// with nobody waking them again: the writer's notice wakes reconciliation, which records
// the transaction the database did not know and releases the signer, and the next create
// is served above it.
func TestPipelineWorkersRecoverAQuarantinedSigner(t *testing.T) {
	t.Parallel()
	pool, sim := testsupport.MigratedPool(t), newSimulated(t)
	// The stuck loop's own pace is an hour: only the writer's notice and the loop's paced
	// wakes during the recovery can make it run.
	n := newPipelineNode(t, pool, sim, pipelineOptions{recoverByIntent: true, stuckScan: time.Hour})
	n.start(t)
	if _, errs := n.allocate(t, 1); errors.Join(errs...) != nil {
		t.Fatal(errors.Join(errs...))
	}
	waitFor(t, 20*time.Second, "the first transaction CONFIRMED", func() bool { return n.allConfirmed(t, 1) })

	// The key sends nonce 1 outside the service: what a database that lost a commit no
	// longer knows.
	n.sendOutside(t, 1)
	waitFor(t, 10*time.Second, "the outside transaction in the node's pool", func() bool {
		pending, err := sim.PendingNonceAt(t.Context(), n.signer)
		return err == nil && pending == 2
	})
	_, errs := n.allocate(t, 1)
	if !errors.Is(errs[0], domain.ErrUnavailable) {
		t.Fatalf("a create while the chain is ahead: %v, want UNAVAILABLE while the signer recovers", errs[0])
	}

	var served domain.ManagedTx
	waitFor(t, 20*time.Second, "a create served after the recovery", func() bool {
		txs, errs := n.allocate(t, 1)
		served = txs[0]
		return errs[0] == nil
	})
	if served.Nonce != 2 {
		t.Fatalf("the create after the recovery got nonce %d, want 2 (above the recovered one)", served.Nonce)
	}
	var recovered bool
	if err := pool.QueryRow(t.Context(), "SELECT recovered_at IS NOT NULL FROM managed_tx WHERE signer = $1 AND nonce = 1", n.signer.Hex()).Scan(&recovered); err != nil || !recovered {
		t.Fatalf("nonce 1 recorded as recovered: %t (%v), want true", recovered, err)
	}
}

// sendOutside sends, with the signer's key but not through the service, a transfer at
// nonce.
func (n *pipelineNode) sendOutside(t *testing.T, nonce uint64) {
	t.Helper()
	id := big.NewInt(chain.SimulatedChainID)
	tx, err := types.SignNewTx(n.key, types.LatestSignerForChainID(id), &types.DynamicFeeTx{
		ChainID: id, Nonce: nonce, Gas: 21_000, To: &n.signer, Value: big.NewInt(1), GasTipCap: big.NewInt(params.GWei), GasFeeCap: big.NewInt(100 * params.GWei),
	})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := tx.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if err := n.sim.SendRawTransaction(t.Context(), raw); err != nil {
		t.Fatalf("send nonce %d: %v", nonce, err)
	}
}
