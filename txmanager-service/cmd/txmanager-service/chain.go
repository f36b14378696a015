package main

import (
	"context"
	"crypto/ecdsa"
	"fmt"
	"math/big"
	"time"

	"github.com/go-kratos/kratos/v2/log"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/signer"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// ChainConnection is the chain the service runs against: a JSON-RPC node, or the embedded
// simulated chain with its funded development keys.
type ChainConnection struct {
	Chain       services.Chain
	ChainID     services.ChainID
	DevKeys     []*ecdsa.PrivateKey
	Description string
}

// NewChainConnection dials chain.rpcUrl, or starts the embedded chain when it is empty.
func NewChainConnection(bc *conf.Bootstrap, metrics *telemetry.Metrics, logger log.Logger) (*ChainConnection, func(), error) {
	helper := log.NewHelper(logger)
	if bc.Chain.RPCURL != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		rpcChain, err := chain.DialRPC(ctx, bc.Chain.RPCURL, chain.WithTracer(metrics.Tracer))
		if err != nil {
			return nil, nil, fmt.Errorf("dial chain: %w", err)
		}
		id, err := rpcChain.ChainID(ctx)
		if err != nil {
			rpcChain.Close()
			return nil, nil, fmt.Errorf("chain id: %w", err)
		}
		helper.Infow("msg", "connected to chain", "chain_id", id.String())
		return &ChainConnection{Chain: rpcChain, ChainID: services.ChainID{Int: id}, Description: fmt.Sprintf("JSON-RPC node, chain id %s", id)},
			rpcChain.Close, nil
	}
	sim, err := chain.NewSimulated(chain.SimulatedConfig{
		BlockInterval: bc.Chain.Embedded.BlockInterval.Std(),
		DevAccounts:   bc.Chain.Embedded.DevAccounts,
		HTTPAddr:      bc.Chain.Embedded.HTTPAddr,
		RPCOptions:    []chain.RPCOption{chain.WithTracer(metrics.Tracer)},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("start embedded chain: %w", err)
	}
	desc := fmt.Sprintf("embedded simulated chain (id %d, a block every %s, %d funded dev accounts)", chain.SimulatedChainID, bc.Chain.Embedded.BlockInterval.Std(), len(sim.DevKeys()))
	if ep := sim.HTTPEndpoint(); ep != "" {
		desc += ", JSON-RPC at " + ep
	}
	helper.Infow("msg", "embedded chain started", "dev_accounts", len(sim.DevKeys()))
	cleanup := func() {
		if err := sim.Close(); err != nil {
			helper.Warnw("msg", "closing embedded chain", "error", err.Error())
		}
	}
	return &ChainConnection{Chain: sim, ChainID: services.ChainID{Int: big.NewInt(chain.SimulatedChainID)}, DevKeys: sim.DevKeys(), Description: desc},
		cleanup, nil
}

// NewSignerRegistry builds the key sources from configuration; in development the embedded
// chain's funded accounts are added.
func NewSignerRegistry(bc *conf.Bootstrap, c *ChainConnection) (*signer.Registry, func(), error) {
	var devKeys []*ecdsa.PrivateKey
	if bc.Environment == conf.EnvironmentDevelopment {
		devKeys = c.DevKeys
	}
	return signer.NewFromConfig(bc.Signers, bc.Environment, devKeys)
}
