package app

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/go-kratos/kratos/v2/log"
	"go.opentelemetry.io/otel/attribute"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/signer"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
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

// NewChainConnection connects to the configured endpoints, or starts the embedded chain
// when there are none, and refuses a chain other than the one the database belongs to.
func NewChainConnection(bc *conf.Bootstrap, identities services.ChainIdentityStore, metrics *telemetry.Metrics, logger log.Logger) (*ChainConnection, func(), error) {
	helper := log.NewHelper(logger)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	rpcOptions := []chain.RPCOption{chain.WithTracer(metrics.Tracer)}
	var (
		endpoints []chain.Endpoint
		sim       *chain.SimulatedChain
		closeAll  = func() {}
	)
	if urls := bc.Chain.Endpoints(); len(urls) > 0 {
		for i, url := range urls {
			rpcChain, err := chain.DialRPC(ctx, url, rpcOptions...)
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
		ProbeInterval: bc.Chain.Health.ProbeInterval.Std(), MaxLagBlocks: bc.Chain.Health.MaxLagBlocks, BroadcastToAll: bc.Chain.BroadcastToAll,
	}, logger)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	cleanup := func() {
		multi.Close()
		closeAll()
	}
	if err := registerEndpointGauges(metrics, multi); err != nil {
		cleanup()
		return nil, nil, err
	}
	identity, err := multi.VerifyIdentity(ctx)
	if err == nil {
		err = services.VerifyChainIdentity(ctx, identities, services.ChainIdentity{ChainID: identity.ChainID.String(), GenesisHash: identity.GenesisHash.Hex()})
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

// NewSignerRegistry builds the key sources from configuration; in development the embedded
// chain's funded accounts are added.
// Outside development no signer may be an account whose key is public knowledge.
func NewSignerRegistry(bc *conf.Bootstrap, c *ChainConnection) (*signer.Registry, func(), error) {
	var devKeys []*ecdsa.PrivateKey
	if bc.Environment == conf.EnvironmentDevelopment {
		devKeys = c.DevKeys
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
