package testsupport

import (
	"context"
	"fmt"
	"math/big"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/ethereum/go-ethereum/common"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/internal/writer"
)

// WriterNode is one service instance's allocation path on a shared database.
type WriterNode struct {
	TxManager txmanager.Manager
	Leases    *services.LeaseManager
	Allocator *writer.Allocator
	Store     *GatedStore
}

type WriterNodeOptions struct {
	LeaseDuration time.Duration
	Skew          time.Duration
	// Clock is the allocator's clock (the system's when nil): a node whose clock is off.
	Clock services.Clock
	// LockTimeout bounds the node's waits for row locks (the library's default when 0): a
	// test that holds a lock longer on purpose raises it.
	LockTimeout time.Duration
}

// NewWriterNode is a node named name on pool, its lease manager and allocator.
func NewWriterNode(t testing.TB, pool *pgxpool.Pool, name string, opts WriterNodeOptions) *WriterNode {
	t.Helper()
	if opts.LeaseDuration == 0 {
		opts.LeaseDuration = 10 * time.Second
	}
	logger := log.NewStdLogger(os.Stderr)
	if !testing.Verbose() {
		logger = log.NewFilter(logger, log.FilterLevel(log.LevelError))
	}
	component, err := txmanager.NewComponentWithDependencies(txmanager.Config{LockTimeout: opts.LockTimeout}, pool, txmanager.Dependencies{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	metrics := telemetry.Noop()
	leases := services.NewLeaseManager(services.LeaseConfig{
		Node: name, Duration: opts.LeaseDuration, RenewInterval: opts.LeaseDuration / 4, Skew: opts.Skew,
		IdleTimeout: time.Minute, NotLeaderRetryAfter: time.Second,
	}, repositories.NewLeaseRepository(pool, TestChain()), services.SystemClock{}, metrics, logger)
	store := &GatedStore{AllocationStore: repositories.NewAllocationRepository(TestChain())}
	var clock services.Clock = services.SystemClock{}
	if opts.Clock != nil {
		clock = opts.Clock
	}
	allocator := writer.NewAllocator(component.Manager, store, leases, nil, TestChain(), services.NewNonceCache(nil),
		writer.NonceConfig{ChainQuery: false}, clock, nil, metrics, logger)
	return &WriterNode{TxManager: component.Manager, Leases: leases, Allocator: allocator, Store: store}
}

// Allocate runs one writer batch of n transfers for signer and returns the ops.
func (n *WriterNode) Allocate(t testing.TB, signer common.Address, count int, requestIDs ...string) []*writer.Op {
	t.Helper()
	ops := make([]*writer.Op, count)
	for i := range ops {
		req := domain.CreateRequest{Signer: signer, Intent: domain.Intent{To: &signer, Value: big.NewInt(int64(i + 1)), GasLimit: 21000}}
		if i < len(requestIDs) {
			req.RequestID = requestIDs[i]
		}
		ops[i] = writer.NewOp(t.Context(), req, 21000)
	}
	n.Allocator.AllocateBatch(context.Background(), ops)
	return ops
}

// Results waits for every op of a batch and returns their answers.
func Results(t *testing.T, ops []*writer.Op) ([]domain.ManagedTx, []error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	txs := make([]domain.ManagedTx, len(ops))
	errs := make([]error, len(ops))
	for i, op := range ops {
		txs[i], _, errs[i] = op.Wait(ctx)
	}
	return txs, errs
}

// GatedStore lets a test stop a node at exact points of its batch transaction, and counts
// its idempotency look-ups.
type GatedStore struct {
	services.AllocationStore
	mu         sync.Mutex
	beforeLock *Gate
	afterLock  *Gate
	Lookups    atomic.Int64
	// leaseChecks counts the full path's lease checks; clearWrites the signers' parts
	// written by the one-statement path, and clearCalls its statements.
	LeaseChecks atomic.Int64
	ClearWrites atomic.Int64
	ClearCalls  atomic.Int64
}

func (s *GatedStore) FindByRequestIDs(ctx context.Context, sess txmanager.Session, signer common.Address, requestIDs []string) (map[string]domain.ManagedTx, error) {
	s.Lookups.Add(1)
	return s.AllocationStore.FindByRequestIDs(ctx, sess, signer, requestIDs)
}

// Gate stops a batch at a point until the test releases it.
type Gate struct {
	Reached chan struct{}
	Release chan struct{}
}

func NewGate() *Gate { return &Gate{Reached: make(chan struct{}), Release: make(chan struct{})} }

func (g *Gate) pass() {
	close(g.Reached)
	<-g.Release
}

func (s *GatedStore) SetGates(before, after *Gate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.beforeLock, s.afterLock = before, after
}

// takeGates hands the gates set to the next lease check, whichever path makes it.
func (s *GatedStore) takeGates() (before, after *Gate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	before, after = s.beforeLock, s.afterLock
	s.beforeLock, s.afterLock = nil, nil
	return before, after
}

func (s *GatedStore) LockLeaseAndReadCursor(ctx context.Context, sess txmanager.Session, lease domain.Lease, requestIDs []string) (services.CursorState, error) {
	before, after := s.takeGates()
	if before != nil {
		before.pass()
	}
	s.LeaseChecks.Add(1)
	cursor, err := s.AllocationStore.LockLeaseAndReadCursor(ctx, sess, lease, requestIDs)
	if after != nil {
		after.pass()
	}
	return cursor, err
}

// WriteClearAllocations is gated like the lease check: the one-statement path checks the
// leases (and holds them and the roster rows) in the statement that writes.
func (s *GatedStore) WriteClearAllocations(ctx context.Context, sess txmanager.Session, parts []services.ClearAllocation) ([]bool, error) {
	before, after := s.takeGates()
	if before != nil {
		before.pass()
	}
	s.ClearCalls.Add(1)
	written, err := s.AllocationStore.WriteClearAllocations(ctx, sess, parts)
	for _, w := range written {
		if w {
			s.ClearWrites.Add(1)
		}
	}
	if after != nil {
		after.pass()
	}
	return written, err
}

// SignerAddress is a made-up signer address for tests that never sign.
func SignerAddress(i int) common.Address {
	return common.HexToAddress(fmt.Sprintf("0x%040x", 0xabc000+i))
}

// RowWant is a managed_tx row a test expects: its nonce and fencing token.
type RowWant struct {
	Nonce int64
	Token int64
}

// AssertSignerRows checks the signer's managed_tx rows are exactly want (by nonce) and the
// cursor stands at next with the last writer's token.
func AssertSignerRows(t *testing.T, pool *pgxpool.Pool, signer string, want []RowWant, next int64) {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT nonce, fencing_token FROM managed_tx WHERE signer = $1 ORDER BY nonce", signer)
	if err != nil {
		t.Fatal(err)
	}
	var got []RowWant
	for rows.Next() {
		var r RowWant
		if err := rows.Scan(&r.Nonce, &r.Token); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("managed_tx (nonce, token) = %v, want %v", got, want)
	}
	var cursor, token int64
	if err := pool.QueryRow(context.Background(), "SELECT next_nonce, fencing_token FROM signer_nonce_cursor WHERE signer = $1", signer).Scan(&cursor, &token); err != nil {
		t.Fatal(err)
	}
	if cursor != next || token != want[len(want)-1].Token {
		t.Fatalf("cursor = %d (token %d), want %d (token %d)", cursor, token, next, want[len(want)-1].Token)
	}
}

// TestChain is the chain id the allocation tests write under.
func TestChain() services.ChainID { return services.ChainID{Int: big.NewInt(1337)} }
