package app

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/ethereum/go-ethereum/common"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/wire"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/receipts"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/reconcile"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/stuck"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/submitting"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/server"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/signer"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/internal/workers"
	"github.com/bionicotaku/txmanager-service/internal/writer"
)

// PipelineSet is one chain's pipeline: the shared signing and broadcasting, and each stage.
var PipelineSet = wire.NewSet(
	pipeline.NewSigner,
	pipeline.NewBroadcaster,
	submitting.New,
	receipts.New,
	receipts.NewSchedule,
	stuck.New,
	reconcile.New,
	wire.Bind(new(services.TxResolver), new(*stuck.Resolver)),
)

// ChainConnection is the chain the service runs against: JSON-RPC endpoints, or the
// embedded simulated chain with its funded development keys, behind one MultiChain (every
// call with a deadline, failover between endpoints, health probes).
type ChainConnection struct {
	Chain       services.Chain
	Endpoints   *chain.MultiChain
	ChainID     services.ChainID
	DevKeys     []*ecdsa.PrivateKey
	Description string
}

// startTimeout bounds dialing and the identity check at start.
const startTimeout = 30 * time.Second

// ChainShared is what every chain stack uses from the process: one pool, one transaction
// manager, one signer registry (the same key signs on every chain), the feed and the node
// registry. Metrics and Logger are the process's; each chain records and logs through its
// own view of them (chainMetrics, chainLogger).
type ChainShared struct {
	Pool        *pgxpool.Pool
	Manager     txmanager.Manager
	ServerWatch *repositories.ServerWatch
	Incarnation services.Incarnation
	Signers     *signer.Registry
	Feed        *workers.FeedSequencerLoop
	Nodes       *services.NodeRegistry
	Standby     *services.StandbyWait
	Identities  *repositories.ChainIdentityRepository
	Metrics     *telemetry.Metrics
	Logger      log.Logger
}

// ChainStack is one served chain's components.
type ChainStack struct {
	Connection *ChainConnection
	Services   *services.ChainServices
	Writer     *writer.Writer
	Keeper     *workers.LeaseKeeper
	Pipeline   *workers.PipelineWorkers
	Leases     *services.LeaseManager
	Funds      *workers.FundsGaugeLoop
	Funding    *workers.FundingLoop
}

// ChainStacks are the served chains, in configuration order.
type ChainStacks []*ChainStack

// NewChainStacks builds one stack per served chain. A chain that cannot be reached or is
// not the chain the database knows under its id stops the start.
func NewChainStacks(bc *conf.Bootstrap, shared *ChainShared) (ChainStacks, func(), error) {
	var (
		stacks   ChainStacks
		cleanups []func()
	)
	cleanupAll := func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}
	for _, view := range bc.ChainViews() {
		stack, cleanup, err := newChainStack(view, shared)
		if err != nil {
			cleanupAll()
			if bc.ServesSeveralChains() {
				err = fmt.Errorf("chain %d: %w", view.Chain.ID, err)
			}
			return nil, nil, err
		}
		stacks = append(stacks, stack)
		cleanups = append(cleanups, cleanup)
	}
	return stacks, cleanupAll, nil
}

// ChainServicesOf indexes the stacks' use cases by chain id for the controllers.
func ChainServicesOf(stacks ChainStacks) *services.Chains {
	all := make([]*services.ChainServices, len(stacks))
	for i, s := range stacks {
		all[i] = s.Services
	}
	return services.NewChains(all)
}

// ReadinessChainsOf is what /readyz probes: every served chain.
func ReadinessChainsOf(stacks ChainStacks) []server.ReadinessChain {
	out := make([]server.ReadinessChain, len(stacks))
	for i, s := range stacks {
		out[i] = server.ReadinessChain{ID: s.Services.ID, Chain: s.Connection.Chain, Signers: s.Services.Conditions}
	}
	return out
}

func newChainServices(conn *ChainConnection, create *services.CreateTxUseCase, get *services.GetTxUseCase, admin *services.AdminUseCase,
	conditions *services.SignerConditions, funds *services.FundsGuard) *services.ChainServices {
	return &services.ChainServices{ID: conn.ChainID.Uint64(), Create: create, Get: get, Admin: admin, Conditions: conditions, Funds: funds}
}

// chainMetrics is the chain's view of the instruments: every series carries chain_id.
func chainMetrics(shared *ChainShared, conn *ChainConnection) *telemetry.Metrics {
	return shared.Metrics.ForChain(conn.ChainID.Uint64())
}

// chainLogger tags every log line of the chain's components with chain_id.
func chainLogger(shared *ChainShared, conn *ChainConnection) log.Logger {
	return log.With(shared.Logger, "chain_id", conn.ChainID.Uint64())
}

// NewChainConnection connects to the configured endpoints, or starts the embedded chain
// when there are none, and refuses a chain other than the one configured or the one the
// database knows under that id. bc is the chain's view of the configuration.
func NewChainConnection(bc *conf.Bootstrap, shared *ChainShared) (*ChainConnection, func(), error) {
	metrics, logger := shared.Metrics, shared.Logger
	helper := log.NewHelper(logger)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	// Chain calls' spans name the chain when the configuration does (the single-chain
	// form learns its id from the endpoints only after dialing them).
	tracer := metrics.Tracer
	if bc.Chain.ID != 0 {
		tracer = metrics.ForChain(bc.Chain.ID).Tracer
	}
	rpcOptions := []chain.RPCOption{chain.WithTracer(tracer), chain.WithResponseCompression(bc.Chain.RPCCompression),
		chain.WithOPStackFees(bc.Chain.FeeModel == conf.FeeModelOPStack)}
	var (
		endpoints []chain.Endpoint
		sim       *chain.SimulatedChain
		closeAll  = func() {}
	)
	if urls := bc.Chain.Endpoints(); len(urls) > 0 {
		for i, url := range urls {
			rpcChain, err := chain.DialRPC(ctx, url, append(rpcOptions, chain.WithEndpointName(chain.EndpointName(i, url)))...)
			if err != nil {
				for _, e := range endpoints {
					e.Chain.Close()
				}
				return nil, nil, fmt.Errorf("chain endpoint %s: %w", chain.EndpointName(i, url), err)
			}
			endpoints = append(endpoints, chain.Endpoint{Name: chain.EndpointName(i, url), Chain: rpcChain})
		}
	} else {
		var err error
		sim, err = chain.NewSimulated(chain.SimulatedConfig{
			BlockInterval: bc.Chain.Embedded.BlockInterval.Std(),
			DevAccounts:   bc.Chain.Embedded.DevAccounts,
			HTTPAddr:      bc.Chain.Embedded.HTTPAddr,
			ChainID:       bc.Chain.ID,
			RPCOptions:    rpcOptions,
		})
		if err != nil {
			return nil, nil, fmt.Errorf("start embedded chain: %w", err)
		}
		endpoints = []chain.Endpoint{{Name: "embedded", Chain: sim.RPCChain}}
		closeAll = func() {
			if err := sim.Close(); err != nil {
				helper.Warnw("msg", "closing embedded chain", "error", err.Error())
			}
		}
	}
	multi, err := chain.NewMultiChain(endpoints, chain.MultiChainConfig{
		ReadTimeout: bc.Chain.Timeouts.Read.Std(), SendTimeout: bc.Chain.Timeouts.Send.Std(), ReceiptsTimeout: bc.Chain.Timeouts.Receipts.Std(),
		ProbeInterval: bc.Chain.Health.ProbeInterval.Std(), MaxLagBlocks: bc.Chain.LagBlocks(), BroadcastToAll: bc.Chain.BroadcastToAll,
		FeeMaxAge: feeMaxAge(bc),
	}, logger)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	cleanup := func() {
		multi.Close()
		closeAll()
	}
	verify := func(ctx context.Context) (chain.Identity, error) {
		identity, err := multi.VerifyIdentity(ctx)
		if err == nil && bc.Chain.ID != 0 && identity.ChainID.Uint64() != bc.Chain.ID {
			err = fmt.Errorf("%w: configured as chain id %d, the endpoints serve chain id %s", services.ErrOtherChain, bc.Chain.ID, identity.ChainID)
		}
		if err == nil {
			err = services.VerifyChainIdentity(ctx, shared.Identities, services.ChainIdentity{ChainID: identity.ChainID.String(), GenesisHash: identity.GenesisHash.Hex()},
				bc.ServesSeveralChains())
		}
		return identity, err
	}
	identity, err := verify(ctx)
	if err != nil && sim == nil && bc.ServesSeveralChains() && errors.Is(err, services.ErrNoChainEndpoint) {
		// One chain whose endpoints are down must not keep the others from serving: this
		// one starts held, refusing its work as unavailable, and opens once
		// its endpoints answer and prove to be the configured chain.
		if err := registerEndpointGauges(metrics.ForChain(bc.Chain.ID), multi); err != nil {
			cleanup()
			return nil, nil, err
		}
		multi.HoldUntilVerified(bc.Chain.ID)
		stopWatch := awaitIdentity(multi, verify, bc.Chain.Health.ProbeInterval.Std(), log.NewHelper(log.With(logger, "chain_id", bc.Chain.ID)))
		helper.Warnw("msg", "no endpoint of this chain answered at start: its creates answer UNAVAILABLE until one does and serves the chain",
			"chain_id", bc.Chain.ID, "error", err.Error())
		conn := &ChainConnection{Chain: multi, Endpoints: multi, ChainID: services.ChainID{Int: new(big.Int).SetUint64(bc.Chain.ID)},
			Description: fmt.Sprintf("chain id %d over %d JSON-RPC endpoint(s), unreachable at start (waiting for it)", bc.Chain.ID, len(endpoints))}
		return conn, func() { stopWatch(); cleanup() }, nil
	}
	if err == nil {
		err = registerEndpointGauges(metrics.ForChain(identity.ChainID.Uint64()), multi)
	}
	if err != nil {
		cleanup()
		if sim != nil && errors.Is(err, services.ErrOtherChain) {
			err = fmt.Errorf("%w\nThe embedded chain starts empty on every run, so this database's transactions belong to an earlier run "+
				"whose blocks and nonces are gone. Use a fresh database (unset DATABASE_URL for a throwaway one), or empty this one: "+
				"psql \"$DATABASE_URL\" -c 'DROP SCHEMA public CASCADE; CREATE SCHEMA public'", err)
		}
		return nil, nil, err
	}
	conn := &ChainConnection{Chain: multi, Endpoints: multi, ChainID: services.ChainID{Int: identity.ChainID}}
	if sim != nil {
		conn.DevKeys = sim.DevKeys()
		conn.Description = fmt.Sprintf("embedded simulated chain (id %s, a block every %s, %d funded dev accounts)", identity.ChainID, bc.Chain.Embedded.BlockInterval.Std(), len(sim.DevKeys()))
		if ep := sim.HTTPEndpoint(); ep != "" {
			conn.Description += ", JSON-RPC at " + ep
		}
		helper.Infow("msg", "embedded chain started", "dev_accounts", len(sim.DevKeys()), "genesis", identity.GenesisHash.Hex())
	} else {
		conn.Description = fmt.Sprintf("chain id %s over %d JSON-RPC endpoint(s)", identity.ChainID, len(endpoints))
		helper.Infow("msg", "connected to chain", "chain_id", identity.ChainID.String(), "genesis", identity.GenesisHash.Hex(), "endpoints", len(endpoints))
	}
	return conn, cleanup, nil
}

// awaitIdentity proves a chain's identity in the background, every interval, and opens
// the held chain once it is proven. An endpoint serving another chain keeps it held and is
// logged as an error each time: that is a configuration to fix, not a fault to wait out.
// It returns the function that stops it.
func awaitIdentity(held *chain.MultiChain, verify func(context.Context) (chain.Identity, error), interval time.Duration, helper *log.Helper) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		ticker := time.NewTicker(max(interval, time.Second))
		defer ticker.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-ticker.C:
			}
			attemptCtx, cancelAttempt := context.WithTimeout(ctx, startTimeout)
			identity, err := verify(attemptCtx)
			cancelAttempt()
			switch {
			case err == nil:
				held.Open()
				helper.Infow("msg", "chain reachable and verified: serving it", "genesis", identity.GenesisHash.Hex())
				return
			case errors.Is(err, services.ErrNoChainEndpoint) || ctx.Err() != nil:
				helper.Debugw("msg", "chain still unreachable", "error", err.Error())
			default:
				helper.Errorw("msg", "chain endpoints answer but cannot be served: fix the configuration", "error", err.Error())
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// NewSignerRegistry builds the key sources from configuration; in development the embedded
// chains' funded accounts are added (the same deterministic keys on every embedded chain).
// Outside development no signer may be an account whose key is public knowledge.
func NewSignerRegistry(bc *conf.Bootstrap) (*signer.Registry, func(), error) {
	var devKeys []*ecdsa.PrivateKey
	if bc.Environment == conf.EnvironmentDevelopment {
		accounts := 0
		for _, view := range bc.ChainViews() {
			if len(view.Chain.Endpoints()) == 0 {
				accounts = max(accounts, chain.DevAccountsOrDefault(view.Chain.Embedded.DevAccounts))
			}
		}
		var err error
		if devKeys, err = chain.DevKeys(accounts); err != nil {
			return nil, nil, err
		}
	}
	registry, cleanup, err := signer.NewFromConfig(bc.Signers, bc.Environment, devKeys)
	if err != nil || bc.Environment == conf.EnvironmentDevelopment {
		return registry, cleanup, err
	}
	if err := refusePublicKeys(registry.Addresses()); err != nil {
		cleanup()
		return nil, nil, err
	}
	return registry, cleanup, nil
}

func refusePublicKeys(addrs []common.Address) error {
	public, err := chain.PublicDevelopmentAddresses()
	if err != nil {
		return err
	}
	var errs []error
	for _, addr := range addrs {
		if origin, ok := public[addr]; ok {
			errs = append(errs, fmt.Errorf("signer %s is the %s, whose private key is public: remove it from signers.keystore / signers.external (development keys are refused outside development)", addr.Hex(), origin))
		}
	}
	return errors.Join(errs...)
}

// registerEndpointGauges exposes each endpoint's health: chain_endpoint_up (1 when it
// answers and serves this chain) and chain_endpoint_head (its latest block).
func registerEndpointGauges(metrics *telemetry.Metrics, multi *chain.MultiChain) error {
	up := func(h chain.EndpointHealth) int64 {
		if h.Reachable && !h.WrongChain {
			return 1
		}
		return 0
	}
	if err := metrics.RegisterGauge(telemetry.ChainEndpointUp, "1 while a chain endpoint answers and serves the configured chain, else 0.",
		func(_ context.Context, record func(int64, ...attribute.KeyValue)) {
			for _, h := range multi.Health() {
				record(up(h), attribute.String("endpoint", h.Name))
			}
		}); err != nil {
		return err
	}
	return metrics.RegisterGauge(telemetry.ChainEndpointHead, "Latest block number each chain endpoint reported.",
		func(_ context.Context, record func(int64, ...attribute.KeyValue)) {
			for _, h := range multi.Health() {
				record(int64(h.Head), attribute.String("endpoint", h.Name))
			}
		})
}

// feeMaxAge is how long one fee suggestion serves all of a chain's signers: one receipt poll
// interval (the configured block-time hint), at most a second, so a fee move is seen within
// a block and a fee spike within a second.
func feeMaxAge(bc *conf.Bootstrap) time.Duration {
	const ceiling = time.Second
	if poll := bc.Pipeline.Receipts.PollInterval.Std(); poll > 0 && poll < ceiling {
		return poll
	}
	return ceiling
}
