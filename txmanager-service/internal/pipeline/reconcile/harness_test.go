package reconcile_test

import (
	"context"
	"crypto/ecdsa"
	"math/big"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/params"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/reconcile"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/submitting"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
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
	// base is the node and chain the stage is built on.
	base *testsupport.SignerStage
}

func newStage(t *testing.T) *stage {
	t.Helper()
	return newStageWith(t, testsupport.SignerStageOptions{DevAccounts: 1})
}

// newStageWith is a stage whose node and chain are shaped by opts.
func newStageWith(t *testing.T, opts testsupport.SignerStageOptions) *stage {
	t.Helper()
	base := testsupport.NewSignerStage(t, opts)
	return &stage{t: t, pool: base.Pool, sim: base.Sim, key: base.Key, signer: base.Signer, node: base.Node, lease: base.Lease,
		submitter: base.Submitter, store: repositories.NewReconcileRepository(base.Pool, chainID), admin: repositories.NewAdminRepository(base.Pool, chainID),
		logger: base.Logger, base: base}
}

// reconciler is the stage under test on this node, timed by clock.
func (s *stage) reconciler(cfg reconcile.Config, clock services.Clock) *reconcile.Reconciler {
	s.t.Helper()
	return s.reconcilerOn(s.sim, cfg, clock)
}

// reconcilerOn is the stage under test reading the chain through history (a fault proxy in
// front of the simulated node).
func (s *stage) reconcilerOn(history services.ChainHistory, cfg reconcile.Config, clock services.Clock) *reconcile.Reconciler {
	s.t.Helper()
	r, err := reconcile.New(cfg, s.store, repositories.NewAttemptRepository(s.pool, chainID), history, s.node.Leases, clock, telemetry.Noop(), s.logger)
	if err != nil {
		s.t.Fatal(err)
	}
	return r
}

// sendOutside sends, with the signer's key but not through the service, a transfer at
// nonce: what a database that lost its last commits no longer knows about.
func (s *stage) sendOutside(nonce uint64, to common.Address, value int64, tip int64) common.Hash {
	s.t.Helper()
	return s.sendOutsideCapped(nonce, to, value, tip, 100*params.GWei)
}

// sendOutsideCapped is sendOutside with a fee cap of its own (a replacement must raise it).
func (s *stage) sendOutsideCapped(nonce uint64, to common.Address, value, tip, feeCap int64) common.Hash {
	s.t.Helper()
	id := big.NewInt(chain.SimulatedChainID)
	tx, err := types.SignNewTx(s.key, types.LatestSignerForChainID(id), &types.DynamicFeeTx{
		ChainID: id, Nonce: nonce, Gas: 21_000, To: &to, Value: big.NewInt(value),
		GasTipCap: big.NewInt(tip), GasFeeCap: big.NewInt(feeCap),
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

// Helpers every stage test uses, from the shared stage.
func (s *stage) waitPending(want uint64) { s.t.Helper(); s.base.WaitPending(want) }

func ctx(t *testing.T) context.Context { t.Helper(); return testsupport.BoundedContext(t) }

func (s *stage) allocate(count int) []domain.ManagedTx { s.t.Helper(); return s.base.Allocate(count) }

func (s *stage) submit() { s.t.Helper(); s.base.Submit() }

func (s *stage) mine(n int) uint64 { return s.base.Mine(n) }
