package writer_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/internal/writer"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// chainNonces stands for the chain's pending nonce (the chain adapter, outside this
// package): what the test says the chain holds. Its first endpoint answers next; another
// endpoint's pool may hold more (otherPool), which only a question to every endpoint sees.
type chainNonces struct {
	mu        sync.Mutex
	next      uint64
	otherPool uint64
}

func (c *chainNonces) PendingNonceAt(context.Context, common.Address) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.next, nil
}

func (c *chainNonces) HighestPendingNonceAt(context.Context, common.Address) (uint64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return max(c.next, c.otherPool), nil
}

func (c *chainNonces) set(next, otherPool uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next, c.otherPool = next, otherPool
}

// notices stands for the pipeline's loops (outside this package): what the writer told them.
type notices struct {
	mu          sync.Mutex
	allocated   []uint64 // the next nonce after each batch
	quarantined []string
}

func (n *notices) NotifyAllocated(_ domain.Lease, next uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.allocated = append(n.allocated, next)
}

func (n *notices) NotifyQuarantined(signer string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.quarantined = append(n.quarantined, signer)
}

func (n *notices) quarantines() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.quarantined)
}

// chainAwareNode is a node's allocator that asks the chain at every batch (its view of the
// chain is never fresh enough to skip it), on a real database.
type chainAwareNode struct {
	pool      *pgxpool.Pool
	node      *testsupport.WriterNode
	chain     *chainNonces
	notices   *notices
	allocator *writer.Allocator
}

func newChainAwareNode(t *testing.T, nonce writer.NonceConfig) *chainAwareNode {
	t.Helper()
	pool := testsupport.MigratedPool(t)
	n := &chainAwareNode{pool: pool, node: testsupport.NewWriterNode(t, pool, "node-a", testsupport.WriterNodeOptions{}), chain: &chainNonces{}, notices: &notices{}}
	nonce.ChainQuery, nonce.StateTimeout = true, time.Nanosecond
	n.allocator = writer.NewAllocator(n.node.TxManager, repositories.NewAllocationRepository(testsupport.TestChain()), n.node.Leases, n.chain, testsupport.TestChain(),
		services.NewNonceCache(nil), nonce, services.SystemClock{}, n.notices, telemetry.Noop(), log.NewStdLogger(io.Discard))
	return n
}

// allocate runs one batch of the requests and returns each answer.
func (n *chainAwareNode) allocate(t *testing.T, reqs ...domain.CreateRequest) []answer {
	t.Helper()
	ops := make([]*writer.Op, len(reqs))
	for i, req := range reqs {
		ops[i] = writer.NewOp(t.Context(), req, 21000)
	}
	n.allocator.AllocateBatch(t.Context(), ops)
	out := make([]answer, len(ops))
	for i, op := range ops {
		out[i].tx, out[i].created, out[i].err = op.Wait(t.Context())
	}
	return out
}

// quarantine is the signer's quarantine row: its nonces, and whether it is live.
func (n *chainAwareNode) quarantine(t *testing.T, signer common.Address) string {
	t.Helper()
	var dbNext, chainNext int64
	var live bool
	err := n.pool.QueryRow(t.Context(), "SELECT db_next_nonce, chain_nonce, released_at IS NULL FROM signer_quarantine WHERE signer = $1", signer.Hex()).
		Scan(&dbNext, &chainNext, &live)
	if errors.Is(err, pgx.ErrNoRows) {
		return "none"
	}
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d..%d live=%t", dbNext, chainNext, live)
}

// A batch compares the chain's nonce with the cursor. Ahead of it, the chain holds nonces the
// database does not know: the signer is quarantined and refused (held for an operator, or
// told to retry while the pipeline recovers it, which the writer wakes), unless unknown
// nonces are adopted (a key also used elsewhere). A signer the database never allocated for
// starts at the chain's nonce; one whose unknown nonces an operator released is served above
// them.
func TestAllocatorQuarantinesASignerTheChainIsAheadOf(t *testing.T) {
	t.Parallel()
	type step struct {
		chain uint64
		// otherPool: what another endpoint's pool holds (0: nothing more).
		otherPool uint64
		before    func(t *testing.T, n *chainAwareNode, signer common.Address)
		// wantNonce is the create's nonce; wantErr its error instead.
		wantNonce uint64
		wantErr   error
	}
	requestRelease := func(t *testing.T, n *chainAwareNode, signer common.Address) {
		if ok, err := repositories.NewAdminRepository(n.pool, testsupport.TestChain()).RequestRelease(t.Context(), signer.Hex(), "operator", "looked"); err != nil || !ok {
			t.Fatalf("request release: %t, %v", ok, err)
		}
	}
	released := func(t *testing.T, n *chainAwareNode, signer common.Address) {
		if _, err := n.pool.Exec(t.Context(), "UPDATE signer_quarantine SET released_at = now() WHERE signer = $1", signer.Hex()); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name  string
		nonce writer.NonceConfig
		// fresh: the database never allocated for the signer; otherwise a first batch took
		// nonces 0 and 1 with the chain at 0.
		fresh          bool
		steps          []step
		wantQuarantine string
		wantNotified   int
	}{
		{name: "the chain at the cursor", steps: []step{{chain: 2, wantNonce: 2}}, wantQuarantine: "none"},
		{name: "the chain ahead, held for an operator", steps: []step{
			{chain: 5, wantErr: domain.ErrSignerQuarantined},
			{chain: 2, wantErr: domain.ErrSignerQuarantined}, // held until released, whatever the chain says now
		}, wantQuarantine: "2..5 live=true"},
		{name: "the chain ahead in one endpoint's pool only", steps: []step{
			{chain: 2, otherPool: 4, wantErr: domain.ErrSignerQuarantined},
		}, wantQuarantine: "2..4 live=true"},
		{name: "the chain ahead, recovered by intent", nonce: writer.NonceConfig{RecoverByIntent: true}, steps: []step{
			{chain: 5, wantErr: domain.ErrUnavailable},
			{chain: 5, wantErr: domain.ErrUnavailable},
		}, wantQuarantine: "2..5 live=true", wantNotified: 2},
		{name: "an operator's release requested: recovering", steps: []step{
			{chain: 5, wantErr: domain.ErrSignerQuarantined},
			{chain: 5, before: requestRelease, wantErr: domain.ErrUnavailable},
		}, wantQuarantine: "2..5 live=true", wantNotified: 1},
		{name: "released nonces are allocated above", steps: []step{
			{chain: 5, wantErr: domain.ErrSignerQuarantined},
			{chain: 5, before: released, wantNonce: 5},
		}, wantQuarantine: "2..5 live=false"},
		{name: "unknown chain nonces adopted", nonce: writer.NonceConfig{AdoptUnknownChainNonces: true}, steps: []step{{chain: 5, wantNonce: 5}}, wantQuarantine: "none"},
		{name: "a first use starts at the chain's nonce", fresh: true, steps: []step{{chain: 3, wantNonce: 3}}, wantQuarantine: "none"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			n := newChainAwareNode(t, tc.nonce)
			signer := testsupport.SignerAddress(110)
			if !tc.fresh {
				for _, a := range n.allocate(t, transferRequest(signer, 1), transferRequest(signer, 2)) {
					if a.err != nil {
						t.Fatal(a.err)
					}
				}
			}
			for i, s := range tc.steps {
				n.chain.set(s.chain, s.otherPool)
				if s.before != nil {
					s.before(t, n, signer)
				}
				a := n.allocate(t, transferRequest(signer, int64(10+i)))[0]
				switch {
				case s.wantErr != nil && !errors.Is(a.err, s.wantErr):
					t.Fatalf("step %d: %+v, want %v", i, a, s.wantErr)
				case s.wantErr == nil && (a.err != nil || !a.created || a.tx.Nonce != s.wantNonce):
					t.Fatalf("step %d: %+v, want created at nonce %d", i, a, s.wantNonce)
				}
			}
			if got := n.quarantine(t, signer); got != tc.wantQuarantine {
				t.Fatalf("quarantine %s, want %s", got, tc.wantQuarantine)
			}
			if got := n.notices.quarantines(); got != tc.wantNotified {
				t.Fatalf("the pipeline was woken for %d quarantines, want %d", got, tc.wantNotified)
			}
			// Webhook subscribers hear of each quarantine recorded, once.
			var events, quarantines int
			if err := n.pool.QueryRow(t.Context(), `SELECT (SELECT count(*) FROM service_event WHERE kind = 'signer.quarantined' AND signer = $1),
				(SELECT count(*) FROM signer_quarantine WHERE signer = $1)`, signer.Hex()).Scan(&events, &quarantines); err != nil || events != quarantines {
				t.Fatalf("%d signer.quarantined events for %d quarantines recorded (%v)", events, quarantines, err)
			}
		})
	}
}

// A lost request's retry is answered with the transaction recovery found on chain for it
// (same signer, recipient, value and data), not executed again: the batch's creates with a
// request id adopt the recovered transactions of their intent, each at most once; creates of
// other intents, or without a request id, get new nonces. A later replay of the adopting
// request answers the same transaction.
func TestAllocatorAdoptsRecoveredTransactions(t *testing.T) {
	t.Parallel()
	n := newChainAwareNode(t, writer.NonceConfig{RecoverByIntent: true})
	signer := testsupport.SignerAddress(111)
	if a := n.allocate(t, transferRequest(signer, 1))[0]; a.err != nil {
		t.Fatal(a.err)
	}
	lease, err := n.node.Leases.Acquire(t.Context(), signer.Hex())
	if err != nil {
		t.Fatal(err)
	}
	// Recovery recorded the transaction at nonce 1 (value 7), adoptable for an hour, and moved
	// the cursor past it.
	lost := transferRequest(signer, 7)
	recovered := uuid.New()
	key := lost.RecoveryKey()
	if _, err := n.pool.Exec(t.Context(), `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, sub_state, tx_hash, fencing_token,
		recovered_at, recovery_key, unclaimed_until) VALUES (1337, $1, $2, '\x00', 1, $3, 'TRACKING', 'SIGNED', '0x01', $4, now(), $5, now() + interval '1 hour')`,
		recovered, signer.Hex(), fmt.Sprintf(`{"to":%q,"value":"7","gasLimit":21000,"effectiveGasLimit":21000}`, signer.Hex()), int64(lease.Token), key[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := n.pool.Exec(t.Context(), "UPDATE signer_nonce_cursor SET next_nonce = 2 WHERE signer = $1", signer.Hex()); err != nil {
		t.Fatal(err)
	}
	n.chain.set(2, 0)

	withID := func(req domain.CreateRequest, id string) domain.CreateRequest { req.RequestID = id; return req }
	answers := n.allocate(t,
		withID(lost, "lost-1"),                      // the lost request's retry
		withID(transferRequest(signer, 7), "new-1"), // the same intent, another request: nothing left to adopt
		transferRequest(signer, 7),                  // no request id: never adopts
		withID(transferRequest(signer, 8), "new-2"), // another intent
	)
	type want struct {
		created bool
		nonce   uint64
		id      uuid.UUID // zero: any new id
	}
	wants := []want{{false, 1, recovered}, {true, 2, uuid.UUID{}}, {true, 3, uuid.UUID{}}, {true, 4, uuid.UUID{}}}
	for i, w := range wants {
		a := answers[i]
		if a.err != nil || a.created != w.created || a.tx.Nonce != w.nonce || (w.id != uuid.UUID{} && a.tx.ID != w.id) {
			t.Fatalf("create %d: %+v (created %t), want created %t at nonce %d", i, a.tx, a.created, w.created, w.nonce)
		}
	}
	replay := n.allocate(t, withID(lost, "lost-1"))[0]
	if replay.err != nil || replay.created || replay.tx.ID != recovered {
		t.Fatalf("the adopting request's replay: %+v, want the recovered %s", replay, recovered)
	}
	var requestID string
	var adoptable bool
	if err := n.pool.QueryRow(t.Context(), "SELECT request_id, unclaimed_until IS NOT NULL FROM managed_tx WHERE tx_id = $1", recovered).Scan(&requestID, &adoptable); err != nil {
		t.Fatal(err)
	}
	if requestID != "lost-1" || adoptable {
		t.Fatalf("the recovered row: request %q adoptable %t, want claimed by lost-1", requestID, adoptable)
	}
}

// A recovered transaction that a retried create adopts counts in the signer's policy windows
// like the admission the database lost: the window holds what the adoption and a new create
// of the same batch sent.
func TestAnAdoptedTransactionCountsInThePolicyWindows(t *testing.T) {
	t.Parallel()
	n := newChainAwareNode(t, writer.NonceConfig{RecoverByIntent: true})
	signer := testsupport.SignerAddress(112)
	if a := n.allocate(t, transferRequest(signer, 1))[0]; a.err != nil {
		t.Fatal(a.err)
	}
	lease, err := n.node.Leases.Acquire(t.Context(), signer.Hex())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newPolicyBook(t, n.pool).Set(t.Context(), "signer", signer.Hex(), []byte(`{"windows":[{"period":"24h","maxValue":"1000"}]}`), "ops"); err != nil {
		t.Fatal(err)
	}
	lost := transferRequest(signer, 7)
	key := lost.RecoveryKey()
	if _, err := n.pool.Exec(t.Context(), `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, sub_state, tx_hash, fencing_token,
		recovered_at, recovery_key, unclaimed_until) VALUES (1337, $1, $2, '\x00', 1, $3, 'TRACKING', 'SIGNED', '0x01', $4, now(), $5, now() + interval '1 hour')`,
		uuid.New(), signer.Hex(), fmt.Sprintf(`{"to":%q,"value":"7","gasLimit":21000,"effectiveGasLimit":21000}`, signer.Hex()), int64(lease.Token), key[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := n.pool.Exec(t.Context(), "UPDATE signer_nonce_cursor SET next_nonce = 2 WHERE signer = $1", signer.Hex()); err != nil {
		t.Fatal(err)
	}
	n.chain.set(2, 0)
	lost.RequestID = "lost-1"
	fresh := transferRequest(signer, 8)
	fresh.RequestID = "new-1"
	answers := n.allocate(t, lost, fresh)
	if answers[0].err != nil || answers[0].created || answers[1].err != nil || !answers[1].created {
		t.Fatalf("adoption and create: %+v", answers)
	}
	var counted string
	if err := n.pool.QueryRow(t.Context(), `SELECT COALESCE(sum(value_wei), 0)::text FROM policy_spend WHERE scope_kind = 'signer' AND scope = $1`, signer.Hex()).Scan(&counted); err != nil || counted != "15" {
		t.Fatalf("the window counts %s wei (%v), want 15: the adopted 7 and the new 8", counted, err)
	}
}

// A database that lost the signer's last allocations while this node's cache, fresh enough
// not to ask the chain, still holds the nonces after them (a failover the server watch did
// not see): the batch is refused for a retry and the cache dropped, so the retry reads the
// chain, finds it ahead of the cursor and quarantines the signer, instead of allocating
// above the lost nonces as if nothing had happened. A database that lost the cursor row
// too (every commit of a signer new to it) goes the same way, its cursor read as 0: read
// as a first use, the retry would allocate above the lost nonces, and a lost request's
// retry would be executed twice.
func TestAllocatorNoticesACursorBelowItsCache(t *testing.T) {
	t.Parallel()
	const (
		lastTwo = `WITH gone AS (DELETE FROM managed_tx WHERE signer = $1 AND nonce >= 2)
			UPDATE signer_nonce_cursor SET next_nonce = 2 WHERE signer = $1`
		everything = `WITH gone AS (DELETE FROM managed_tx WHERE signer = $1)
			DELETE FROM signer_nonce_cursor WHERE signer = $1`
	)
	tests := []struct {
		name string
		// lost is what the failover lost, as statements on the signer's rows.
		lost       string
		chainQuery bool
		// stateTimeout: how long the cache is trusted without asking the chain.
		stateTimeout   time.Duration
		wantRetryFirst bool
		// wantQuarantine is the quarantine after the loss; with none, wantNonce is the
		// nonce the next create is given.
		wantQuarantine string
		wantNonce      uint64
	}{
		{"the last two allocations", lastTwo, true, time.Hour, true, "2..4 live=true", 0},
		{"every allocation and the cursor", everything, true, time.Hour, true, "0..4 live=true", 0},
		// The cache is stale: the batch asks the chain, and the cursor read as 0 quarantines
		// at once.
		{"every allocation and the cursor, the cache stale", everything, true, time.Nanosecond, false, "0..4 live=true", 0},
		// Without the chain term the cache is the only record of the lost nonces: the next
		// create is given the nonce after them, none is given twice.
		{"the last two allocations, no chain query", lastTwo, false, time.Hour, false, "none", 4},
		{"every allocation and the cursor, no chain query", everything, false, time.Hour, false, "none", 4},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := testsupport.MigratedPool(t)
			node := testsupport.NewWriterNode(t, pool, "node-a", testsupport.WriterNodeOptions{})
			chain := &chainNonces{}
			n := &chainAwareNode{pool: pool, node: node, chain: chain, notices: &notices{}}
			n.allocator = writer.NewAllocator(node.TxManager, repositories.NewAllocationRepository(testsupport.TestChain()), node.Leases, chain, testsupport.TestChain(),
				services.NewNonceCache(nil), writer.NonceConfig{ChainQuery: tc.chainQuery, StateTimeout: tc.stateTimeout}, services.SystemClock{}, n.notices, telemetry.Noop(),
				log.NewStdLogger(io.Discard))
			signer := testsupport.SignerAddress(111 + 100*i)
			for i, a := range n.allocate(t, transferRequest(signer, 1), transferRequest(signer, 2), transferRequest(signer, 3), transferRequest(signer, 4)) {
				if a.err != nil || a.tx.Nonce != uint64(i) {
					t.Fatalf("create %d: %+v", i, a)
				}
			}
			if _, err := pool.Exec(t.Context(), tc.lost, signer.Hex()); err != nil {
				t.Fatal(err)
			}
			chain.set(4, 0) // the chain holds all four
			if tc.wantRetryFirst {
				if a := n.allocate(t, transferRequest(signer, 5))[0]; !errors.Is(a.err, domain.ErrUnavailable) {
					t.Fatalf("the first create after the loss: %+v, want UNAVAILABLE (retry)", a)
				}
			}
			if tc.wantQuarantine == "none" {
				if a := n.allocate(t, transferRequest(signer, 5))[0]; a.err != nil || a.tx.Nonce != tc.wantNonce {
					t.Fatalf("a create after the loss: %+v, want nonce %d", a, tc.wantNonce)
				}
			} else {
				for _, which := range []string{"a create after the loss", "its retry"} {
					if a := n.allocate(t, transferRequest(signer, 5))[0]; !errors.Is(a.err, domain.ErrSignerQuarantined) {
						t.Fatalf("%s: %+v, want the signer quarantined", which, a)
					}
				}
			}
			if got := n.quarantine(t, signer); got != tc.wantQuarantine {
				t.Fatalf("quarantine %s, want %s", got, tc.wantQuarantine)
			}
		})
	}
}

// A lost request's retry that may only adopt (its checks refused a new transaction) on a
// signer whose cursor the node has cached goes the full path, which looks for what it may
// adopt; the batch's other signers' creates are written beside it. Before, the common path
// was handed a signer with nothing to number, and the whole batch failed.
func TestAnAdoptOnlyRetryOnACachedCursorLeavesTheBatchAlone(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	node := testsupport.NewWriterNode(t, pool, "node-a", testsupport.WriterNodeOptions{})
	signer, other := testsupport.SignerAddress(112), testsupport.SignerAddress(113)
	for i, s := range []common.Address{signer, other} {
		if _, errs := testsupport.Results(t, node.Allocate(t, s, 1, fmt.Sprintf("warm-%d", i))); errors.Join(errs...) != nil {
			t.Fatal(errs)
		}
	}
	lease, err := node.Leases.Acquire(t.Context(), signer.Hex())
	if err != nil {
		t.Fatal(err)
	}
	lost := transferRequest(signer, 5)
	lost.RequestID = "lost-1"
	recovered := uuid.New()
	key := lost.RecoveryKey()
	if _, err := pool.Exec(t.Context(), `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, sub_state, tx_hash, fencing_token,
		recovered_at, recovery_key, unclaimed_until) VALUES (1337, $1, $2, '\x00', 500, $3, 'TRACKING', 'SIGNED', '0x01', $4, now(), $5, now() + interval '1 hour')`,
		recovered, signer.Hex(), fmt.Sprintf(`{"to":%q,"value":"5","gasLimit":21000,"effectiveGasLimit":21000}`, signer.Hex()), int64(lease.Token), key[:]); err != nil {
		t.Fatal(err)
	}
	lost.Admission.AdoptOnly = domain.ErrInsufficientFunds
	bystander := transferRequest(other, 1)
	bystander.RequestID = "bystander-1"
	ops := []*writer.Op{writer.NewOp(t.Context(), lost, 21000), writer.NewOp(t.Context(), bystander, 21000)}
	node.Allocator.AllocateBatch(t.Context(), ops)
	retry, retryCreated, retryErr := ops[0].Wait(t.Context())
	if retryErr != nil || retryCreated || retry.ID != recovered {
		t.Fatalf("the lost request's retry: %+v, created %t, %v; want the recovered %s adopted", retry, retryCreated, retryErr, recovered)
	}
	tx, created, err := ops[1].Wait(t.Context())
	if err != nil || !created || tx.Nonce != 1 {
		t.Fatalf("another signer's create in the batch: %+v, created %t, %v; want created at nonce 1", tx, created, err)
	}
}
