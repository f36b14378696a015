package controllers_test

import (
	"context"
	"errors"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/controllers"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/internal/writer"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// The controllers are tested over the real use cases: creates go through the lease
// manager, the writer and its allocator into PostgreSQL, reads come back through the
// repositories, and gas is estimated by the embedded simulated chain. Only the ports a
// test needs to steer (the signer directory, the stuck resolver, the feed store, the key
// sources, the owner forwarder) are small fakes.

// testIncarnation is every test node's process incarnation.
const testIncarnation services.Incarnation = "test"

// testChainID is the chain the test nodes serve (the allocation tests' chain).
var testChainID = testsupport.TestChain().Uint64()

// testEnv is one test's database and embedded chain, which its nodes share.
type testEnv struct {
	pool *pgxpool.Pool
	sim  *chain.SimulatedChain
	// dev are the chain's funded development accounts.
	dev []common.Address
}

func newTestEnv(t *testing.T) *testEnv {
	t.Helper()
	sim, err := chain.NewSimulated(chain.SimulatedConfig{DevAccounts: 4})
	if err != nil {
		t.Fatalf("simulated chain: %v", err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	return &testEnv{pool: testsupport.MigratedPool(t), sim: sim, dev: sim.DevAddresses()}
}

func testLogger() log.Logger {
	if testing.Verbose() {
		return log.NewStdLogger(os.Stderr)
	}
	return log.NewStdLogger(io.Discard)
}

// signerDirectory stands for the signer registry: which signers this node holds keys for,
// and which of them are retired.
type signerDirectory struct {
	mu      sync.Mutex
	held    []common.Address
	retired map[common.Address]bool
}

func (d *signerDirectory) Accepts(signer common.Address) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.retired[signer] {
		return domain.ErrSignerRetired
	}
	for _, a := range d.held {
		if a == signer {
			return nil
		}
	}
	return domain.ErrUnknownSigner
}

func (d *signerDirectory) Addresses() []common.Address {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]common.Address(nil), d.held...)
}

// resolver stands for the stuck stage: it answers the action it was asked for (cancel
// when the hook is left to decide) and records the call.
type resolver struct {
	mu    sync.Mutex
	calls []string
}

func (r *resolver) ResolveTx(_ context.Context, id uuid.UUID, action domain.ResolutionAction, reason string) (domain.ResolutionAction, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, id.String()+":"+string(action)+":"+reason)
	if action == "" {
		action = domain.ActionCancel
	}
	return action, nil
}

// peers forwards to the test nodes by owner, as the internal gRPC forwarding would: the
// owner serves the request with the hop count raised and the caller's principal.
type peers struct {
	mu    sync.Mutex
	nodes map[string]*testNode
	// down are owners that cannot be reached.
	down     map[string]bool
	forwards []string
}

func newPeers() *peers { return &peers{nodes: map[string]*testNode{}, down: map[string]bool{}} }

func (p *peers) owner(owner string) (*testNode, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.forwards = append(p.forwards, owner)
	if p.down[owner] {
		return nil, &domain.UnavailableError{Reason: "lease owner " + owner + " unreachable"}
	}
	n, ok := p.nodes[owner]
	if !ok {
		return nil, &domain.UnavailableError{Reason: "lease owner " + owner + " is not alive"}
	}
	return n, nil
}

func (p *peers) forwarded() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.forwards...)
}

func (p *peers) ForwardCreate(ctx context.Context, owner string, req *v1.CreateTxRequest) (*v1.CreateTxResponse, error) {
	n, err := p.owner(owner)
	if err != nil {
		return nil, err
	}
	return n.tx.CreateTx(controllers.WithHops(ctx, controllers.Hops(ctx)+1), req)
}

func (p *peers) ForwardResolve(ctx context.Context, owner string, req *v1.ResolveTxRequest) (*v1.ResolveTxResponse, error) {
	n, err := p.owner(owner)
	if err != nil {
		return nil, err
	}
	return n.admin.ResolveTx(controllers.WithHops(ctx, controllers.Hops(ctx)+1), req)
}

// testNode is one service instance's controllers over its own use cases on a shared
// database, and the fakes a test steers it by.
type testNode struct {
	tx       *controllers.TxController
	admin    *controllers.AdminController
	signers  *signerDirectory
	resolver *resolver
	feed     *feedStore
	notify   *services.FeedNotifier
	keys     *fakeKeys
	nodes    *services.NodeRegistry
}

type nodeOptions struct {
	routing controllers.Routing
	peers   *peers
	// signers are the signers the node holds keys for (the chain's funded dev accounts by
	// default).
	signers []common.Address
	// adminStore replaces the admin repository (a quarantine the test sets up).
	adminStore services.AdminStore
	// estimateGas asks the chain for intents without a gas limit.
	estimateGas bool
}

// node is a service instance named name on the environment's database and chain; what it
// started stops when t ends.
func (e *testEnv) node(t *testing.T, name string, opts nodeOptions) *testNode {
	t.Helper()
	pool, sim := e.pool, e.sim
	logger := testLogger()
	metrics := telemetry.Noop()
	clock := services.SystemClock{}
	chainID := testsupport.TestChain()
	if opts.signers == nil {
		opts.signers = e.dev
	}
	if opts.peers == nil {
		opts.peers = newPeers()
	}
	if opts.adminStore == nil {
		opts.adminStore = repositories.NewAdminRepository(pool, chainID)
	}
	// Leases name their owner as production does: the node id and its process's
	// incarnation, which the node registry counts them by.
	owner := services.LeaseOwner(name, testIncarnation)
	wn := testsupport.NewWriterNode(t, pool, owner, testsupport.WriterNodeOptions{})
	queue, err := writer.New(writer.QueueConfig{Workers: 2, BatchSize: 16, QueueSize: 64}, wn.Allocator, metrics)
	if err != nil {
		t.Fatal(err)
	}
	queue.Start(context.Background())
	t.Cleanup(func() { queue.Stop(context.Background()) })

	funds, err := services.NewFundsGuard(services.FundsConfig{}, sim, repositories.NewFundsRepository(pool, chainID), clock, metrics)
	if err != nil {
		t.Fatal(err)
	}
	signing := services.NewSigningHealth(services.SigningStallConfig{}, repositories.NewSigningRepository(pool, chainID), clock, logger)
	dir := &signerDirectory{held: opts.signers, retired: map[common.Address]bool{}}
	txs := repositories.NewTxRepository(pool, chainID)
	standby := services.NewStandbyWait(repositories.NewStandbyRepository(pool))
	create := services.NewCreateTxUseCase(services.CreateConfig{Limits: domain.DefaultLimits(), EstimateGas: opts.estimateGas, GasEstimateMultiplier: 1.2},
		dir, txs, sim, wn.Leases, funds, signing, queue, standby, clock, metrics, logger)
	nodes := services.NewNodeRegistry(services.NodeConfig{
		Self:    services.NodeInfo{ID: name, Incarnation: string(testIncarnation), GRPCAddr: "127.0.0.1:1", HTTPAddr: "127.0.0.1:2", Version: "test", StartedAt: time.Now()},
		Timeout: time.Minute,
	}, repositories.NewNodeRepository(pool), logger)
	res := &resolver{}
	admin := services.NewAdminUseCase(services.AdminConfig{ScanBlocks: 16, ReleaseWait: time.Second}, res, sim, opts.adminStore, nodes, dir)
	chains := services.NewChains([]*services.ChainServices{{ID: testChainID, Create: create, Get: services.NewGetTxUseCase(txs), Admin: admin}})

	feed := &feedStore{}
	notify := services.NewFeedNotifier()
	// Below the stream's own 25 s long-poll: the stream waits at most feed.maxWait.
	feedCfg := services.FeedConfig{MaxWait: 2 * time.Second, PollInterval: 20 * time.Millisecond}
	keys := newFakeKeys()
	audit := testsupport.AuditTrail(t, pool, name)
	policies := testsupport.PolicyBook(t, pool, audit)
	roster := services.NewSignerRoster(services.RosterConfig{Node: name, PollInterval: time.Second, BuildTimeout: time.Second},
		repositories.NewRosterRepository(pool), keys, []*services.LeaseManager{wn.Leases}, testsupport.TxManager(t, pool), audit, logger)
	n := &testNode{
		tx: controllers.NewTxController(chains, services.NewCompletionsUseCase(feed, standby, notify, feedCfg), services.NewFinalWait(notify, feedCfg),
			standby, testsupport.ApprovalDesk(t, pool, audit, name), opts.routing, opts.peers, logger),
		admin:    controllers.NewAdminController(chains, opts.routing, opts.peers, roster, policies, audit, nil, nil, logger),
		signers:  dir,
		resolver: res,
		feed:     feed,
		notify:   notify,
		keys:     keys,
		nodes:    nodes,
	}
	opts.peers.mu.Lock()
	opts.peers.nodes[owner] = n
	opts.peers.mu.Unlock()
	return n
}

// Principals the tests call as.
var (
	adminCaller = domain.Principal{ID: "ops", Admin: true, AllSigners: true}
	anyCaller   = domain.Principal{ID: "payments", AllSigners: true}
)

func as(p domain.Principal) context.Context {
	return domain.WithPrincipal(context.Background(), p)
}

// granted is a caller granted only the given signers.
func granted(id string, signers ...common.Address) domain.Principal {
	p := domain.Principal{ID: id, Signers: map[common.Address]bool{}}
	for _, s := range signers {
		p.Signers[s] = true
	}
	return p
}

var errStore = errors.New("store down")
