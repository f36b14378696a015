package services_test

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
)

// testNode is one service instance's allocation path on a shared database.
type testNode struct {
	txm       txmanager.Manager
	leases    *services.LeaseManager
	allocator *services.Allocator
	store     *gatedStore
}

type nodeOptions struct {
	leaseDuration time.Duration
	skew          time.Duration
}

func newTestNode(t testing.TB, pool *pgxpool.Pool, name string, opts nodeOptions) *testNode {
	t.Helper()
	if opts.leaseDuration == 0 {
		opts.leaseDuration = 10 * time.Second
	}
	logger := log.NewStdLogger(os.Stderr)
	if !testing.Verbose() {
		logger = log.NewFilter(logger, log.FilterLevel(log.LevelError))
	}
	component, err := txmanager.NewComponentWithDependencies(txmanager.Config{}, pool, txmanager.Dependencies{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	metrics := telemetry.Noop()
	leases := services.NewLeaseManager(services.LeaseConfig{
		Node: name, Duration: opts.leaseDuration, RenewInterval: opts.leaseDuration / 4, Skew: opts.skew,
		IdleTimeout: time.Minute, NotLeaderRetryAfter: time.Second,
	}, repositories.NewLeaseRepository(pool, testChain()), services.SystemClock{}, metrics, logger)
	store := &gatedStore{AllocationStore: repositories.NewAllocationRepository(testChain())}
	allocator := services.NewAllocator(component.Manager, store, leases, nil, testChain(), services.NewNonceCache(nil),
		services.NonceConfig{ChainQuery: false}, services.SystemClock{}, nil, metrics, logger)
	return &testNode{txm: component.Manager, leases: leases, allocator: allocator, store: store}
}

// allocate runs one writer batch of n transfers for signer and returns the ops.
func (n *testNode) allocate(t testing.TB, signer common.Address, count int, requestIDs ...string) []*services.AllocationOp {
	t.Helper()
	ops := make([]*services.AllocationOp, count)
	for i := range ops {
		req := domain.CreateRequest{Signer: signer, Intent: domain.Intent{To: &signer, Value: big.NewInt(int64(i + 1)), GasLimit: 21000}}
		if i < len(requestIDs) {
			req.RequestID = requestIDs[i]
		}
		ops[i] = services.NewAllocationOp(t.Context(), req, 21000)
	}
	n.allocator.AllocateBatch(context.Background(), ops)
	return ops
}

func results(t *testing.T, ops []*services.AllocationOp) ([]domain.ManagedTx, []error) {
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

// gatedStore lets a test stop a node at exact points of its batch transaction, and counts
// its idempotency look-ups.
type gatedStore struct {
	services.AllocationStore
	mu         sync.Mutex
	beforeLock *gate
	afterLock  *gate
	lookups    atomic.Int64
	// leaseChecks counts the full path's lease checks; clearWrites the signers' parts
	// written by the one-statement path, and clearCalls its statements.
	leaseChecks atomic.Int64
	clearWrites atomic.Int64
	clearCalls  atomic.Int64
}

func (s *gatedStore) FindByRequestIDs(ctx context.Context, sess txmanager.Session, signer common.Address, requestIDs []string) (map[string]domain.ManagedTx, error) {
	s.lookups.Add(1)
	return s.AllocationStore.FindByRequestIDs(ctx, sess, signer, requestIDs)
}

type gate struct {
	reached chan struct{}
	release chan struct{}
}

func newGate() *gate { return &gate{reached: make(chan struct{}), release: make(chan struct{})} }

func (g *gate) pass() {
	close(g.reached)
	<-g.release
}

func (s *gatedStore) setGates(before, after *gate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.beforeLock, s.afterLock = before, after
}

// takeGates hands the gates set to the next lease check, whichever path makes it.
func (s *gatedStore) takeGates() (before, after *gate) {
	s.mu.Lock()
	defer s.mu.Unlock()
	before, after = s.beforeLock, s.afterLock
	s.beforeLock, s.afterLock = nil, nil
	return before, after
}

func (s *gatedStore) LockLeaseAndReadCursor(ctx context.Context, sess txmanager.Session, lease domain.Lease, requestIDs []string) (services.CursorState, error) {
	before, after := s.takeGates()
	if before != nil {
		before.pass()
	}
	s.leaseChecks.Add(1)
	cursor, err := s.AllocationStore.LockLeaseAndReadCursor(ctx, sess, lease, requestIDs)
	if after != nil {
		after.pass()
	}
	return cursor, err
}

// WriteClearAllocations is gated like the lease check: the one-statement path checks the
// leases (and holds them and the roster rows) in the statement that writes.
func (s *gatedStore) WriteClearAllocations(ctx context.Context, sess txmanager.Session, parts []services.ClearAllocation) ([]bool, error) {
	before, after := s.takeGates()
	if before != nil {
		before.pass()
	}
	s.clearCalls.Add(1)
	written, err := s.AllocationStore.WriteClearAllocations(ctx, sess, parts)
	for _, w := range written {
		if w {
			s.clearWrites.Add(1)
		}
	}
	if after != nil {
		after.pass()
	}
	return written, err
}

func signerAddress(i int) common.Address {
	return common.HexToAddress(fmt.Sprintf("0x%040x", 0xabc000+i))
}

type rowWant struct {
	nonce int64
	token int64
}

// assertSignerRows checks the signer's managed_tx rows are exactly want (by nonce) and the
// cursor stands at next with the last writer's token.
func assertSignerRows(t *testing.T, pool *pgxpool.Pool, signer string, want []rowWant, next int64) {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT nonce, fencing_token FROM managed_tx WHERE signer = $1 ORDER BY nonce", signer)
	if err != nil {
		t.Fatal(err)
	}
	var got []rowWant
	for rows.Next() {
		var r rowWant
		if err := rows.Scan(&r.nonce, &r.token); err != nil {
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
	if cursor != next || token != want[len(want)-1].token {
		t.Fatalf("cursor = %d (token %d), want %d (token %d)", cursor, token, next, want[len(want)-1].token)
	}
}
