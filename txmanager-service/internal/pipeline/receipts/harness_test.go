package receipts_test

import (
	"context"
	"crypto/ecdsa"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/params"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/receipts"
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

// stage is one node following one signer's transactions to their final states: a migrated
// database of its own, a simulated chain the test mines by hand, the signer's lease held,
// and the pipeline in front of the stage as production runs it (the writer allocates; the
// submitting stage signs, stores and sends).
type stage struct {
	t      *testing.T
	pool   *pgxpool.Pool
	sim    *chain.SimulatedChain
	signer common.Address
	// other is a second funded account, whose transfers make a block differ from the one
	// it replaces.
	other     *ecdsa.PrivateKey
	node      *testsupport.WriterNode
	lease     domain.Lease
	txSigner  *pipeline.Signer
	attempts  *repositories.AttemptRepository
	submitter *submitting.Submitter
	store     *repositories.ReceiptRepository
	// chain is the stage's adapter over the simulated node, one JSON-RPC call per request,
	// so its request count tells look-ups by hash from whole blocks read.
	chain  *chain.RPCChain
	logger log.Logger
	// base is the node and chain the stage is built on.
	base *testsupport.SignerStage
}

func newStage(t *testing.T) *stage {
	t.Helper()
	s := newStageAtGenesis(t)
	// A first block: the node indexes transactions only once the chain has left genesis.
	s.sim.Commit()
	return s
}

// newStageAtGenesis is a stage whose chain has not left genesis: its node answers every
// receipt look-up with an error until a block is sealed.
func newStageAtGenesis(t *testing.T) *stage {
	t.Helper()
	return stageOn(t, testsupport.NewSignerStage(t, testsupport.SignerStageOptions{DevAccounts: 2, AtGenesis: true}))
}

// stageOn is the receipts stage's view of base.
func stageOn(t *testing.T, base *testsupport.SignerStage) *stage {
	return &stage{t: t, pool: base.Pool, sim: base.Sim, signer: base.Signer, other: base.Sim.DevKeys()[1], node: base.Node, lease: base.Lease,
		txSigner: base.TxSigner, attempts: base.Attempts, submitter: base.Submitter, store: repositories.NewReceiptRepository(base.Pool, chainID),
		chain: chain.NewRPCChain(base.Sim.RPCClient(), chain.WithMaxBatchSize(1)), logger: base.Logger, base: base}
}

// tracker is the stage under test on this node.
func (s *stage) tracker(cfg receipts.Config) *receipts.Tracker {
	return receipts.New(cfg, s.store, s.chain, s.node.Leases, telemetry.Noop(), s.logger)
}

// signers are the signers this node follows.
func (s *stage) signers() []string { return []string{s.lease.Signer} }

// send allocates count self-transfers (values 1, 2, ...), signs, stores and sends them, and
// waits until the node's pool holds them; stored (when not nil) is told of them once they
// are stored, before they are sent, as the receipt schedule is in production.
func (s *stage) send(count int, stored func([]pipeline.TrackedTx)) {
	s.t.Helper()
	_, errs := testsupport.Results(s.t, s.node.Allocate(s.t, s.signer, count))
	for _, err := range errs {
		if err != nil {
			s.t.Fatalf("allocate: %v", err)
		}
	}
	// The submitter reads only above what it signed last unless told to look again: these
	// rows were allocated by a writer that does not announce them to it.
	s.submitter.Rescan(s.lease.Signer)
	if _, err := s.submitter.SubmitAllocated(s.t.Context(), s.lease, stored); err != nil {
		s.t.Fatalf("submit: %v", err)
	}
	s.waitPending(uint64(len(s.rows())))
}

// resign stores a new attempt of kind for the transaction at nonce, at fees a replacement
// must pay, and sends it in place of the one in the node's pool: what re-pricing and stuck
// resolution do.
func (s *stage) resign(nonce uint64, kind pipeline.AttemptKind) common.Hash {
	s.t.Helper()
	row := s.row(nonce)
	var fee, tip string
	if err := s.pool.QueryRow(ctx(s.t), `SELECT max_fee_per_gas::text, max_priority_fee_per_gas::text FROM tx_attempt WHERE tx_hash = $1`, row.hash.Hex()).
		Scan(&fee, &tip); err != nil {
		s.t.Fatal(err)
	}
	suggestion, err := s.chain.SuggestFees(ctx(s.t))
	if err != nil {
		s.t.Fatal(err)
	}
	prevFee, _ := new(big.Int).SetString(fee, 10)
	prevTip, _ := new(big.Int).SetString(tip, 10)
	maxFee, maxTip, err := services.FeePolicy{}.Bump(prevFee, prevTip, suggestion)
	if err != nil {
		s.t.Fatal(err)
	}
	value := big.NewInt(int64(nonce) + 1) // the writer's intent for this nonce
	if !kind.ExecutesIntent() {
		value = new(big.Int)
	}
	attempt, err := s.txSigner.Sign(ctx(s.t), row.id, kind, pipeline.Unsigned{From: s.signer, Nonce: nonce, To: &s.signer, Value: value, Gas: 21_000,
		MaxFee: maxFee, MaxTip: maxTip})
	if err != nil {
		s.t.Fatal(err)
	}
	if recorded, err := s.attempts.RecordAttempt(ctx(s.t), s.lease, attempt, domain.SubStateResolutionSubmitted(domain.ResolutionAction(kind)), time.Minute); err != nil || !recorded {
		s.t.Fatalf("record the %s attempt: %v, %v", kind, recorded, err)
	}
	if errs, err := s.chain.SendRawTransactions(ctx(s.t), [][]byte{attempt.Raw}); err != nil || errs[0] != nil {
		s.t.Fatalf("send the %s attempt: %v, %v", kind, err, errs)
	}
	return attempt.Hash
}

// mine seals n blocks and returns the head's number.
func (s *stage) mine(n int) uint64 {
	s.t.Helper()
	for range n {
		s.sim.Commit()
	}
	head, err := s.sim.LatestHeader(ctx(s.t))
	if err != nil {
		s.t.Fatal(err)
	}
	return head.Number
}

// record looks up the receipts of the signer's transactions, mined at block, and records
// them with the tracker (held or written).
func (s *stage) record(tracker *receipts.Tracker, block uint64) {
	s.t.Helper()
	if _, err := tracker.RecordReceipts(ctx(s.t), s.lookUp(tracker).Found, block); err != nil {
		s.t.Fatal(err)
	}
}

// rollBackTo makes the chain's head the parent of height, dropping the block at height,
// everything above it and the node's pending transactions.
func (s *stage) rollBackTo(height uint64) {
	s.t.Helper()
	parents, err := s.sim.HeadersByNumber(ctx(s.t), []uint64{height - 1})
	if err != nil || parents[0] == nil {
		s.t.Fatalf("parent of block %d: %v", height, err)
	}
	if err := s.sim.Backend().Fork(parents[0].Hash); err != nil {
		s.t.Fatal(err)
	}
	s.sim.Backend().Rollback()
}

// replaceBlock replaces the block at height and everything above it with two new blocks
// (the longer branch) that do not hold the signer's transactions: they are dropped from
// the node's pool, and another account's transfer makes the new block at height differ
// from the one it replaces.
func (s *stage) replaceBlock(height uint64) {
	s.t.Helper()
	s.rollBackTo(height)
	id := big.NewInt(chain.SimulatedChainID)
	to := common.HexToAddress("0x00000000000000000000000000000000000000e1")
	other := crypto.PubkeyToAddress(s.other.PublicKey)
	nonce, err := s.sim.NonceAt(ctx(s.t), other)
	if err != nil {
		s.t.Fatal(err)
	}
	tx, err := types.SignNewTx(s.other, types.LatestSignerForChainID(id), &types.DynamicFeeTx{ChainID: id, Nonce: nonce, Gas: 21_000, To: &to,
		Value: big.NewInt(1), GasTipCap: big.NewInt(params.GWei), GasFeeCap: big.NewInt(100 * params.GWei)})
	if err != nil {
		s.t.Fatal(err)
	}
	raw, err := tx.MarshalBinary()
	if err != nil {
		s.t.Fatal(err)
	}
	if err := s.sim.SendRawTransaction(ctx(s.t), raw); err != nil {
		s.t.Fatal(err)
	}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if pending, err := s.sim.PendingNonceAt(ctx(s.t), other); err == nil && pending > nonce {
			break
		}
		if time.Now().After(deadline) {
			s.t.Fatal("the other account's transfer never reached the pool")
		}
	}
	s.mine(2)
	if replaced, err := s.sim.HeadersByNumber(ctx(s.t), []uint64{height}); err != nil || replaced[0] == nil {
		s.t.Fatalf("new block at %d: %v", height, err)
	}
}

// txRow is what a test reads back of a managed_tx row.
type txRow struct {
	id              uuid.UUID
	nonce           uint64
	state, subState string
	hash            common.Hash
	// block and receiptHash are the receipt on record (0 and zero when none).
	block       uint64
	receiptHash common.Hash
	completions int
}

// rows reads the signer's rows, lowest nonce first.
func (s *stage) rows() []txRow {
	s.t.Helper()
	rows, err := s.pool.Query(s.t.Context(), `SELECT tx_id, nonce, state, COALESCE(sub_state, ''), COALESCE(tx_hash, ''), COALESCE(block_number, 0),
			COALESCE(receipt->>'txHash', ''), (SELECT count(*) FROM tx_completions c WHERE c.tx_id = m.tx_id)
		FROM managed_tx m WHERE signer = $1 ORDER BY nonce`, s.lease.Signer)
	if err != nil {
		s.t.Fatal(err)
	}
	defer rows.Close()
	var out []txRow
	for rows.Next() {
		var r txRow
		var hash, receiptHash string
		if err := rows.Scan(&r.id, &r.nonce, &r.state, &r.subState, &hash, &r.block, &receiptHash, &r.completions); err != nil {
			s.t.Fatal(err)
		}
		r.hash, r.receiptHash = common.HexToHash(hash), common.HexToHash(receiptHash)
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

// lookUp lists what awaits a receipt and looks it up by hash.
func (s *stage) lookUp(tracker *receipts.Tracker) receipts.Outcome {
	s.t.Helper()
	awaiting, err := tracker.AwaitingReceipt(ctx(s.t), s.signers())
	if err != nil {
		s.t.Fatal(err)
	}
	out, err := tracker.CheckReceipts(ctx(s.t), awaiting)
	if err != nil {
		s.t.Fatal(err)
	}
	return out
}

// Helpers every stage test uses, from the shared stage.
func (s *stage) waitPending(want uint64) { s.t.Helper(); s.base.WaitPending(want) }

func ctx(t *testing.T) context.Context { t.Helper(); return testsupport.BoundedContext(t) }
