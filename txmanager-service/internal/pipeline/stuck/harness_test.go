package stuck_test

import (
	"context"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/stuck"
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

// stage is one node resolving one signer's stuck transactions: a migrated database of its
// own, a simulated chain that mines only when the test says (so whatever is sent stays
// unmined, stuck), the signer's lease held, and the pipeline in front of the stage as
// production runs it (the writer allocates; the submitting stage signs, stores and sends).
type stage struct {
	t           *testing.T
	pool        *pgxpool.Pool
	sim         *chain.SimulatedChain
	signer      common.Address
	node        *testsupport.WriterNode
	lease       domain.Lease
	txSigner    *pipeline.Signer
	broadcaster *pipeline.Broadcaster
	attempts    *repositories.AttemptRepository
	submitter   *submitting.Submitter
	store       *repositories.StuckRepository
	logger      log.Logger
	// base is the node and chain the stage is built on.
	base *testsupport.SignerStage
}

func newStage(t *testing.T) *stage {
	t.Helper()
	base := testsupport.NewSignerStage(t, testsupport.SignerStageOptions{DevAccounts: 1})
	return &stage{t: t, pool: base.Pool, sim: base.Sim, signer: base.Signer, node: base.Node, lease: base.Lease, txSigner: base.TxSigner,
		broadcaster: base.Broadcaster, attempts: base.Attempts, submitter: base.Submitter, store: repositories.NewStuckRepository(base.Pool, chainID),
		logger: base.Logger, base: base}
}

// resolver is the stage under test on this node.
func (s *stage) resolver(cfg stuck.Config, hook stuck.Hook) *stuck.Resolver {
	if cfg.ResubmitInterval == 0 {
		cfg.ResubmitInterval = time.Minute
	}
	return stuck.New(cfg, s.store, s.attempts, s.sim, s.txSigner, s.broadcaster, s.node.Leases, hook, nil, services.SystemClock{}, telemetry.Noop(), s.logger)
}

// sendOne allocates one self-transfer of 1 wei at nonce 0, signs, stores and sends it, and
// waits until the node's pool holds it: the head of line, unmined until the test mines.
func (s *stage) sendOne() txRow {
	s.t.Helper()
	if _, errs := testsupport.Results(s.t, s.node.Allocate(s.t, s.signer, 1)); errs[0] != nil {
		s.t.Fatalf("allocate: %v", errs[0])
	}
	// The submitter reads only above what it signed last unless told to look again: the
	// row was allocated by a writer that does not announce it.
	s.submitter.Rescan(s.lease.Signer)
	if _, err := s.submitter.SubmitAllocated(s.t.Context(), s.lease, nil); err != nil {
		s.t.Fatalf("submit: %v", err)
	}
	s.waitPending(1)
	return s.row()
}

// txRow is what a test reads back of the signer's transaction and its current attempt.
type txRow struct {
	id              uuid.UUID
	state, subState string
	hash            common.Hash
	kind            string
	lastError       string
	attempts        int
}

// row reads the signer's one transaction.
func (s *stage) row() txRow {
	s.t.Helper()
	var r txRow
	var hash string
	if err := s.pool.QueryRow(s.t.Context(), `SELECT m.tx_id, m.state, COALESCE(m.sub_state, ''), COALESCE(m.tx_hash, ''), COALESCE(a.kind, ''),
			COALESCE(m.last_error, ''), (SELECT count(*) FROM tx_attempt x WHERE x.tx_id = m.tx_id)
		FROM managed_tx m LEFT JOIN tx_attempt a ON a.tx_hash = m.tx_hash WHERE m.signer = $1`, s.lease.Signer).
		Scan(&r.id, &r.state, &r.subState, &hash, &r.kind, &r.lastError, &r.attempts); err != nil {
		s.t.Fatal(err)
	}
	r.hash = common.HexToHash(hash)
	return r
}

// audit is one stuck_resolution_audit row.
type audit struct {
	action, node, reason string
	token                uint64
	nonce                uint64
}

// audits reads the resolutions recorded for the transaction, oldest first.
func (s *stage) audits(id uuid.UUID) []audit {
	s.t.Helper()
	rows, err := s.pool.Query(s.t.Context(), `SELECT action, node_id, reason, fencing_token, nonce FROM stuck_resolution_audit WHERE tx_id = $1 ORDER BY id`, id)
	if err != nil {
		s.t.Fatal(err)
	}
	defer rows.Close()
	var out []audit
	for rows.Next() {
		var a audit
		if err := rows.Scan(&a.action, &a.node, &a.reason, &a.token, &a.nonce); err != nil {
			s.t.Fatal(err)
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		s.t.Fatal(err)
	}
	return out
}

// minedAtNonceZero seals a block and returns what the chain mined at the signer's nonce 0.
func (s *stage) minedAtNonceZero() services.SentTx {
	s.t.Helper()
	s.sim.Commit()
	found, err := s.sim.SentTransactions(ctx(s.t), s.signer, []uint64{0}, 4)
	if err != nil {
		s.t.Fatal(err)
	}
	sent, ok := found[0]
	if !ok || sent.BlockNumber == 0 {
		s.t.Fatalf("nothing mined at nonce 0: %+v", found)
	}
	return sent
}

// Helpers every stage test uses, from the shared stage.
func (s *stage) waitPending(want uint64) { s.t.Helper(); s.base.WaitPending(want) }

func ctx(t *testing.T) context.Context { t.Helper(); return testsupport.BoundedContext(t) }
