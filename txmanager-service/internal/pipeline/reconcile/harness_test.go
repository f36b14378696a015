package reconcile_test

import (
	"context"
	"crypto/ecdsa"
	"io"
	"math/big"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/params"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/reconcile"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/submitting"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/signer"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// The stage's tests run on a real PostgreSQL (a fresh database each) and the embedded
// chain; pgtest stops what it started once the binary's tests end.
func TestMain(m *testing.M) { pgtest.Main(m) }

// chainID is the embedded chain's id, under which the test repositories write.
var chainID = testsupport.TestChain()

// stage is one node reconciling one signer: a migrated database of its own, a simulated
// chain the test mines by hand, the signer's lease held, and the pipeline in front of the
// stage as production runs it (the writer allocates; the submitting stage signs, stores
// and sends).
type stage struct {
	t         *testing.T
	pool      *pgxpool.Pool
	sim       *chain.SimulatedChain
	key       *ecdsa.PrivateKey
	signer    common.Address
	node      *testsupport.WriterNode
	lease     domain.Lease
	submitter *submitting.Submitter
	store     *repositories.ReconcileRepository
	admin     *repositories.AdminRepository
	logger    log.Logger
}

func newStage(t *testing.T) *stage {
	t.Helper()
	pool := testsupport.MigratedPool(t)
	sim, err := chain.NewSimulated(chain.SimulatedConfig{DevAccounts: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	// A first block: the node indexes transactions only once the chain has left genesis.
	sim.Commit()
	key := sim.DevKeys()[0]
	s := &stage{t: t, pool: pool, sim: sim, key: key, signer: crypto.PubkeyToAddress(key.PublicKey),
		store: repositories.NewReconcileRepository(pool, chainID), admin: repositories.NewAdminRepository(pool, chainID), logger: testLogger()}
	// No lease keeper runs here to renew the lease, so it must outlast the test however
	// slowly a loaded machine runs it under the race detector.
	s.node = testsupport.NewWriterNode(t, pool, "node-a", testsupport.WriterNodeOptions{LeaseDuration: 10 * time.Minute})
	if s.lease, err = s.node.Leases.Acquire(t.Context(), s.signer.Hex()); err != nil {
		t.Fatal(err)
	}
	keys, err := signer.NewRawKeySource(conf.EnvironmentDevelopment, nil, []*ecdsa.PrivateKey{key})
	if err != nil {
		t.Fatal(err)
	}
	metrics := telemetry.Noop()
	watch, err := repositories.NewServerWatch(s.logger, metrics)
	if err != nil {
		t.Fatal(err)
	}
	broadcaster := pipeline.NewBroadcaster(sim, repositories.NewAttemptRepository(pool, chainID), s.node.Leases, metrics, s.logger)
	s.submitter = submitting.New(submitting.Config{Batch: 64, SignConcurrency: 4, ResubmitInterval: time.Minute},
		repositories.NewSubmittingRepository(pool, chainID), sim, pipeline.NewSigner(chainID, keys), broadcaster, s.node.Leases, watch, nil, metrics, s.logger)
	return s
}

// testLogger keeps the stages' logs out of the test output unless -v asks for them.
func testLogger() log.Logger {
	if testing.Verbose() {
		return log.NewStdLogger(os.Stderr)
	}
	return log.NewStdLogger(io.Discard)
}

// reconciler is the stage under test on this node, timed by clock.
func (s *stage) reconciler(cfg reconcile.Config, clock services.Clock) *reconcile.Reconciler {
	s.t.Helper()
	r, err := reconcile.New(cfg, s.store, repositories.NewAttemptRepository(s.pool, chainID), s.sim, s.node.Leases, clock, telemetry.Noop(), s.logger)
	if err != nil {
		s.t.Fatal(err)
	}
	return r
}

// allocate runs one writer batch of count self-transfers (values 1, 2, ...) and returns
// the rows it wrote.
func (s *stage) allocate(count int) []domain.ManagedTx {
	s.t.Helper()
	txs, errs := testsupport.Results(s.t, s.node.Allocate(s.t, s.signer, count))
	for _, err := range errs {
		if err != nil {
			s.t.Fatalf("allocate: %v", err)
		}
	}
	return txs
}

// submit signs, stores and sends every ALLOCATED row of the signer, and waits until the
// node's pool holds what was accepted.
func (s *stage) submit() {
	s.t.Helper()
	// The submitter reads only above what it signed last unless told to look again: these
	// rows were allocated by a writer that does not announce them to it.
	s.submitter.Rescan(s.lease.Signer)
	if _, err := s.submitter.SubmitAllocated(s.t.Context(), s.lease, nil); err != nil {
		s.t.Fatalf("submit: %v", err)
	}
}

// sendOutside sends, with the signer's key but not through the service, a transfer at
// nonce: what a database that lost its last commits no longer knows about.
func (s *stage) sendOutside(nonce uint64, to common.Address, value int64, tip int64) common.Hash {
	s.t.Helper()
	id := big.NewInt(chain.SimulatedChainID)
	tx, err := types.SignNewTx(s.key, types.LatestSignerForChainID(id), &types.DynamicFeeTx{
		ChainID: id, Nonce: nonce, Gas: 21_000, To: &to, Value: big.NewInt(value),
		GasTipCap: big.NewInt(tip), GasFeeCap: big.NewInt(100 * params.GWei),
	})
	if err != nil {
		s.t.Fatal(err)
	}
	raw, err := tx.MarshalBinary()
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.sim.SendRawTransaction(s.t.Context(), raw); err != nil {
		s.t.Fatalf("send nonce %d: %v", nonce, err)
	}
	return tx.Hash()
}

// waitPending waits until the node's pending nonce for the signer is want: the pool takes
// a sent transaction in on its own loop, and a block sealed before would miss it.
func (s *stage) waitPending(want uint64) {
	s.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, err := s.sim.PendingNonceAt(s.t.Context(), s.signer)
		if err != nil {
			s.t.Fatal(err)
		}
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("pending nonce %d, want %d", got, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// mine seals n blocks.
func (s *stage) mine(n int) {
	for range n {
		s.sim.Commit()
	}
}

// txRow is what a test reads back of a managed_tx row.
type txRow struct {
	nonce           uint64
	state, subState string
	hash            string
	recovered       bool
	unclaimed       bool
	placeholder     bool
	lastError       string
	value           string
	to              string
	completions     int
}

// rows reads the signer's rows, lowest nonce first.
func (s *stage) rows() []txRow {
	s.t.Helper()
	rows, err := s.pool.Query(s.t.Context(), `SELECT nonce, state, COALESCE(sub_state, ''), COALESCE(tx_hash, ''), recovered_at IS NOT NULL,
			unclaimed_until IS NOT NULL, placeholder, COALESCE(last_error, ''), COALESCE(payload->>'value', ''), COALESCE(payload->>'to', ''),
			(SELECT count(*) FROM tx_completions c WHERE c.tx_id = m.tx_id)
		FROM managed_tx m WHERE signer = $1 ORDER BY nonce`, s.lease.Signer)
	if err != nil {
		s.t.Fatal(err)
	}
	defer rows.Close()
	var out []txRow
	for rows.Next() {
		var r txRow
		if err := rows.Scan(&r.nonce, &r.state, &r.subState, &r.hash, &r.recovered, &r.unclaimed, &r.placeholder, &r.lastError, &r.value, &r.to,
			&r.completions); err != nil {
			s.t.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		s.t.Fatal(err)
	}
	return out
}

// row is the signer's row at nonce.
func (s *stage) row(nonce uint64) txRow {
	s.t.Helper()
	for _, r := range s.rows() {
		if r.nonce == nonce {
			return r
		}
	}
	s.t.Fatalf("no row at nonce %d", nonce)
	return txRow{}
}

// cursor is the signer's next nonce to allocate (-1: none yet).
func (s *stage) cursor() int64 {
	s.t.Helper()
	check, err := s.store.SignerChainCheck(s.t.Context(), s.lease.Signer)
	if err != nil {
		s.t.Fatal(err)
	}
	return check.NextNonce
}

// quarantine is the signer's quarantine row as the admin API shows it.
func (s *stage) quarantine() services.Quarantine {
	s.t.Helper()
	q, err := s.admin.GetQuarantine(s.t.Context(), s.lease.Signer)
	if err != nil {
		s.t.Fatal(err)
	}
	return q
}

// clock is the wall clock moved forward by the test: a grace period passes at once.
type clock struct{ offset atomic.Int64 }

func (c *clock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

func (c *clock) advance(d time.Duration) { c.offset.Add(int64(d)) }

// ctx is a test's context with a bound, so a hung chain call fails the test instead of
// the whole binary.
func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}
