package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/go-kratos/kratos/v2/log"
	kgrpc "github.com/go-kratos/kratos/v2/transport/grpc"
	khttp "github.com/go-kratos/kratos/v2/transport/http"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/console"
	"github.com/bionicotaku/txmanager-service/internal/controllers"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// The transport is tested over the real controllers and use cases; the use cases' ports
// below the transport's concern (the writer queue, the lease and transaction stores, the
// chain) are small in-memory fakes, so a test steers exactly what a request meets. The
// database is real where the transport itself reaches it: readiness pings the pool, and
// forwarding finds owners in the node registry.

// Credentials of the test callers: a client granted signerA, an operator, a scraper.
const (
	clientKey  = "client-key-for-tests-0001"
	adminKey   = "admin-key-for-tests-0001"
	metricsKey = "metrics-key-for-tests-0001"
)

func keyDigest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

var (
	// signerA is served here; signerLeased is leased by another node; signerUnknown has
	// no key anywhere.
	signerA       = common.HexToAddress("0x00000000000000000000000000000000000000a1")
	signerLeased  = common.HexToAddress("0x00000000000000000000000000000000000000a2")
	signerUnknown = common.HexToAddress("0x00000000000000000000000000000000000000a3")
	// signerChecksummed is served here too; its EIP-55 form mixes cases, so a miscased
	// spelling of it is refused.
	signerChecksummed = common.HexToAddress("0x52908400098527886E0F7030069857D2E4169EE7")
)

func testLogger() log.Logger {
	if testing.Verbose() {
		return log.NewStdLogger(os.Stderr)
	}
	return log.NewStdLogger(io.Discard)
}

// apiKeys are the configured keys: the client may use signerA and signerLeased, the
// operator everything, the scraper only /metrics.
func apiKeys() []conf.APIKey {
	return []conf.APIKey{
		{ID: "client", SHA256: keyDigest(clientKey), Signers: []string{signerA.Hex(), signerLeased.Hex()}},
		{ID: "operator", SHA256: "sha256:" + keyDigest(adminKey), Signers: []string{"*"}, Admin: true},
		{ID: "scraper", SHA256: keyDigest(metricsKey), Metrics: true},
	}
}

// testBootstrap is the configuration sections the transport reads.
func testBootstrap() *conf.Bootstrap {
	return &conf.Bootstrap{
		Server: conf.Server{
			HTTP: conf.HTTPListener{Listener: conf.Listener{Addr: "127.0.0.1:0", Timeout: conf.Duration(5 * time.Second)},
				ReadHeaderTimeout: conf.Duration(5 * time.Second), IdleTimeout: conf.Duration(time.Minute)},
			GRPC:                    conf.Listener{Addr: "127.0.0.1:0", Timeout: conf.Duration(5 * time.Second)},
			MaxBodyBytes:            64 << 10,
			ReadinessInterval:       conf.Duration(time.Hour),
			MaxStreamsPerCredential: 4,
		},
		Auth:    conf.Auth{Enabled: true, APIKeys: apiKeys()},
		Routing: conf.Routing{Mode: conf.RoutingBasic, MaxHops: 1},
	}
}

// memTxs is the transaction store: what the queue allocated.
type memTxs struct {
	mu   sync.Mutex
	byID map[uuid.UUID]domain.ManagedTx
	// panicOn makes a read of that id panic (a bug below the transport); panicOnRequest
	// the same of a read by that request id.
	panicOn        uuid.UUID
	panicOnRequest string
}

func (m *memTxs) GetByID(_ context.Context, id uuid.UUID) (domain.ManagedTx, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if id == m.panicOn {
		panic("read of a poisoned row")
	}
	tx, ok := m.byID[id]
	if !ok {
		return domain.ManagedTx{}, domain.ErrNotFound
	}
	return tx, nil
}

func (m *memTxs) HasAdoptable(context.Context, common.Address, [32]byte) (bool, error) {
	return false, nil
}

func (m *memTxs) GetByRequestID(_ context.Context, signer common.Address, requestID string) (domain.ManagedTx, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if requestID != "" && requestID == m.panicOnRequest {
		panic("read of a poisoned request")
	}
	for _, tx := range m.byID {
		if tx.Signer == signer && tx.RequestID == requestID {
			return tx, nil
		}
	}
	return domain.ManagedTx{}, domain.ErrNotFound
}

// AwaitStandby: an in-memory store has no standby to wait for.
func (m *memTxs) AwaitStandby(context.Context) error { return nil }

// allocation is what the writer queue saw of one create.
type allocation struct {
	caller string
	hops   int
	trace  trace.TraceID
}

// memQueue is the writer: it numbers creates per signer and records who sent them.
type memQueue struct {
	txs  *memTxs
	mu   sync.Mutex
	next map[common.Address]uint64
	seen []allocation
	// hold, when set, keeps creates with this request id waiting until their caller leaves.
	hold string
}

func (q *memQueue) Allocate(ctx context.Context, req domain.CreateRequest, gasLimit uint64, resolved func(domain.ManagedTx, bool, error)) (domain.ManagedTx, bool, error) {
	tx, created, err := q.allocate(ctx, req, gasLimit)
	if resolved != nil {
		resolved(tx, created, err)
	}
	return tx, created, err
}

func (q *memQueue) allocate(ctx context.Context, req domain.CreateRequest, gasLimit uint64) (domain.ManagedTx, bool, error) {
	p, _ := domain.PrincipalFrom(ctx)
	q.mu.Lock()
	q.seen = append(q.seen, allocation{caller: p.ID, hops: controllers.Hops(ctx), trace: trace.SpanContextFromContext(ctx).TraceID()})
	hold := q.hold != "" && req.RequestID == q.hold
	q.mu.Unlock()
	if hold {
		<-ctx.Done()
		return domain.ManagedTx{}, false, ctx.Err()
	}
	// The writer answers a request id already on record with its transaction.
	if req.RequestID != "" {
		if tx, err := q.txs.GetByRequestID(ctx, req.Signer, req.RequestID); err == nil {
			return tx, false, nil
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	now := time.Now().UTC()
	tx := domain.ManagedTx{ID: uuid.New(), ChainID: testChainID, Signer: req.Signer, SignerHex: req.SignerHex, RequestID: req.RequestID,
		Nonce: q.next[req.Signer], Intent: req.Intent, EffectiveGasLimit: gasLimit, State: domain.StateAllocated, CreatedAt: now, UpdatedAt: now}
	q.next[req.Signer]++
	q.txs.mu.Lock()
	q.txs.byID[tx.ID] = tx
	q.txs.mu.Unlock()
	return tx, true, nil
}

func (q *memQueue) allocations() []allocation {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]allocation(nil), q.seen...)
}

// leaseStore grants every lease to the asking node but signerLeased's, which otherOwner
// holds (when set).
type leaseStore struct{ otherOwner string }

func (s leaseStore) AcquireOrRenew(_ context.Context, signer, node string, duration, _ time.Duration) (services.LeaseGrant, error) {
	now := time.Now()
	if signer == signerLeased.Hex() && s.otherOwner != "" {
		return services.LeaseGrant{Signer: signer, Owner: s.otherOwner, Token: 9, ExpiresAt: now.Add(duration), DBNow: now}, nil
	}
	return services.LeaseGrant{Signer: signer, Owner: node, Token: 1, ExpiresAt: now.Add(duration), DBNow: now, Acquired: true}, nil
}

func (leaseStore) Release(context.Context, domain.Lease) error { return nil }

func (leaseStore) Renew(context.Context, string, []string, time.Duration) ([]services.LeaseGrant, error) {
	return nil, nil
}

// signerKeys holds keys for signerA and signerLeased.
type signerKeys struct{}

func (signerKeys) Accepts(signer common.Address) error {
	if signer == signerA || signer == signerLeased || signer == signerChecksummed {
		return nil
	}
	return domain.ErrUnknownSigner
}

func (signerKeys) Addresses() []common.Address { return []common.Address{signerA, signerLeased} }

// fakeChain is the chain as readiness and the create path see it.
type fakeChain struct {
	services.Chain
	mu      sync.Mutex
	headAge time.Duration
	err     error
	probes  int
}

func (c *fakeChain) LatestHeader(context.Context) (*services.BlockHeader, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.probes++
	if c.err != nil {
		return nil, c.err
	}
	return &services.BlockHeader{Number: 7, Time: uint64(time.Now().Add(-c.headAge).Unix())}, nil
}

func (c *fakeChain) Usable() error { return nil }

// SuggestFees answers a block with room for the largest gas limit a test configures.
func (c *fakeChain) SuggestFees(context.Context) (services.FeeSuggestion, error) {
	return services.FeeSuggestion{BlockGasLimit: 1_000_000_000}, nil
}

func (c *fakeChain) probeCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.probes
}

// resolver answers the action asked for.
type resolver struct{}

func (resolver) ResolveTx(_ context.Context, _ uuid.UUID, action domain.ResolutionAction, _ string) (domain.ResolutionAction, error) {
	return action, nil
}

// adminStore answers a signer's status.
type adminStore struct{ services.AdminStore }

func (adminStore) SignerStatus(_ context.Context, signer string) (services.SignerStatus, error) {
	return services.SignerStatus{Signer: signer, LeaseOwner: "node-a", NextNonce: 3}, nil
}

// memFeed is the completions feed: the positioned completions.
type memFeed struct {
	services.CompletionStore
	mu    sync.Mutex
	items []services.Completion
}

func (f *memFeed) ListAfter(_ context.Context, pos services.FeedPosition, limit int, _ []string, _ uint64) ([]services.Completion, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []services.Completion
	for _, c := range f.items {
		if c.Position > pos && len(out) < limit {
			out = append(out, c)
		}
	}
	return out, nil
}

func (f *memFeed) State(context.Context) (services.FeedState, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var last services.FeedPosition
	for _, c := range f.items {
		last = max(last, c.Position)
	}
	return services.FeedState{LastPosition: last}, nil
}

const testChainID = 1337

// stack is one node's transport and what stands behind it.
type stack struct {
	conf      *conf.Bootstrap
	pool      *pgxpool.Pool
	nodes     *services.NodeRegistry
	forwarder *Forwarder
	tx        *controllers.TxController
	admin     *controllers.AdminController
	auth      *Authenticator
	mw        *Middleware
	health    *Health
	chain     *fakeChain
	prom      *telemetry.Prometheus
	txs       *memTxs
	queue     *memQueue
	feed      *memFeed
	streams   *Streams
	limiter   *RateLimiter
	listeners *Listeners
}

type stackOptions struct {
	configure func(*conf.Bootstrap)
	// pool is a database shared with other stacks (forwarding); nil makes one.
	pool *pgxpool.Pool
	// forwarder reaches owners (nil: this stack's own Forwarder).
	forwarder controllers.OwnerForwarder
	// otherOwner holds signerLeased's lease ("node-b#other" by default); ownsAll: this
	// node holds every lease.
	otherOwner string
	ownsAll    bool
	// nodeID names the node (its lease owner is nodeID#test).
	nodeID string
	tracer trace.TracerProvider
}

func newStack(t *testing.T, opts stackOptions) *stack {
	t.Helper()
	c := testBootstrap()
	if opts.configure != nil {
		opts.configure(c)
	}
	if opts.pool == nil {
		opts.pool = testsupport.MigratedPool(t)
	}
	if opts.otherOwner == "" && !opts.ownsAll {
		opts.otherOwner = "node-b#other"
	}
	if opts.nodeID == "" {
		opts.nodeID = "node-a"
	}
	if opts.tracer == nil {
		opts.tracer = tracenoop.NewTracerProvider()
	}
	logger := testLogger()
	prom, cleanup, err := telemetry.NewPrometheus()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	metrics, err := telemetry.NewMetricsFromPrometheus(prom, opts.tracer)
	if err != nil {
		t.Fatal(err)
	}
	listeners, err := Listen(c.Server)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.UseBoundPorts(listeners.Ports()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = listeners.Close() })
	tlsConfigs, err := NewTLSConfigs(c.Server, c.Routing)
	if err != nil {
		t.Fatal(err)
	}
	clock := services.SystemClock{}
	chain := &fakeChain{}
	txs := &memTxs{byID: map[uuid.UUID]domain.ManagedTx{}}
	queue := &memQueue{txs: txs, next: map[common.Address]uint64{}}
	leases := services.NewLeaseManager(services.LeaseConfig{Node: services.LeaseOwner(opts.nodeID, "test"), Duration: 10 * time.Second, RenewInterval: time.Second, IdleTimeout: time.Minute,
		NotLeaderRetryAfter: 1500 * time.Millisecond}, leaseStore{otherOwner: opts.otherOwner}, clock, metrics, logger)
	funds, err := services.NewFundsGuard(services.FundsConfig{}, chain, nil, clock, metrics)
	if err != nil {
		t.Fatal(err)
	}
	standby := services.NewStandbyWait(txs)
	limits := domain.DefaultLimits()
	if c.Create.MaxDataBytes > 0 {
		limits.MaxDataBytes, limits.MaxGasLimit = c.Create.MaxDataBytes, c.Create.MaxGasLimit
	}
	create := services.NewCreateTxUseCase(services.CreateConfig{Limits: limits}, signerKeys{}, txs, chain, leases, funds,
		services.NewSigningHealth(services.SigningStallConfig{}, nil, clock, logger), queue, standby, clock, metrics, logger)
	nodes := services.NewNodeRegistry(services.NodeConfig{Self: services.NodeInfo{ID: opts.nodeID, Incarnation: "test", GRPCAddr: c.Server.GRPC.Addr,
		StartedAt: time.Now().UTC()}, Timeout: time.Minute},
		repositories.NewNodeRepository(opts.pool), logger)
	admin := services.NewAdminUseCase(services.AdminConfig{}, resolver{}, chain, adminStore{}, nodes, signerKeys{})
	chains := services.NewChains([]*services.ChainServices{{ID: testChainID, Create: create, Get: services.NewGetTxUseCase(txs), Admin: admin}})
	var forwarder *Forwarder
	if opts.forwarder == nil {
		var closeForwarder func()
		forwarder, closeForwarder = NewForwarder(nodes, tlsConfigs)
		t.Cleanup(closeForwarder)
		opts.forwarder = forwarder
	}
	routing := controllers.Routing{Forward: c.Routing.Mode == conf.RoutingForward, MaxHops: c.Routing.MaxHops, RetryWait: 20 * time.Millisecond}
	feed := &memFeed{}
	notify := services.NewFeedNotifier()
	feedCfg := services.FeedConfig{MaxWait: 30 * time.Second, PollInterval: 20 * time.Millisecond}
	s := &stack{
		conf: c, pool: opts.pool, nodes: nodes, forwarder: forwarder, chain: chain, prom: prom, txs: txs, queue: queue, feed: feed, listeners: listeners,
		tx: controllers.NewTxController(chains, services.NewCompletionsUseCase(feed, standby, notify, feedCfg), services.NewFinalWait(notify, feedCfg),
			standby, nil,
			routing, opts.forwarder, logger),
		admin: controllers.NewAdminController(chains, routing, opts.forwarder, nil, nil, nil, nil, nil, logger),
	}
	limiter := NewRateLimiter(c.Server, metrics)
	s.limiter = limiter
	s.streams = NewStreams(c.Server, limiter)
	if s.auth, err = NewAuthenticator(c.Auth); err != nil {
		t.Fatal(err)
	}
	if s.mw, err = NewMiddleware(c.Routing, opts.tracer, metrics, s.auth, limiter, logger); err != nil {
		t.Fatal(err)
	}
	s.health = NewHealth(c.Server, opts.pool, replication("synchronous standby"), []ReadinessChain{{ID: testChainID, Chain: chain}}, metrics)
	return s
}

// httpServer is the stack's HTTP server, driven through its handler.
func (s *stack) httpServer() *khttp.Server {
	return NewHTTPServer(s.conf.Server, s.conf.Observability, s.listeners, &TLSConfigs{}, s.tx, s.admin, s.health, s.prom, s.auth, s.mw, s.limiter, new(console.Console)) // the console off: its own tests cover it
}

// serveGRPC serves the stack's gRPC API on its listener until the test ends.
func (s *stack) serveGRPC(t *testing.T, tlsConfigs *TLSConfigs) *kgrpc.Server {
	t.Helper()
	srv := NewGRPCServer(s.conf.Server, s.listeners, tlsConfigs, s.tx, s.admin, s.mw, s.auth, s.streams, s.health)
	done := make(chan error, 1)
	go func() { done <- srv.Start(context.Background()) }()
	t.Cleanup(func() {
		s.streams.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Stop(ctx)
		if err := <-done; err != nil {
			t.Errorf("gRPC server: %v", err)
		}
	})
	return srv
}

// replication is the database server watch's summary.
type replication string

func (r replication) ReplicationSummary() string { return string(r) }
