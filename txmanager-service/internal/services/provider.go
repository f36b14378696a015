package services

import (
	"github.com/google/wire"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// ProviderSet is the use-case layer.
var ProviderSet = wire.NewSet(
	NewLeaseConfig,
	NewNonceConfig,
	NewCreateConfig,
	NewLeaseManager,
	NewNonceCache,
	NewAllocator,
	NewCreateTxUseCase,
	NewGetTxUseCase,
	NewCompletionsUseCase,
	wire.InterfaceValue(new(Clock), SystemClock{}),
)

// NewLeaseConfig maps the lease section.
func NewLeaseConfig(c *conf.Bootstrap) LeaseConfig {
	return LeaseConfig{
		Node:                c.Node.ID,
		Duration:            c.Lease.Duration.Std(),
		RenewInterval:       c.Lease.RenewInterval.Std(),
		Skew:                c.Lease.ClockSkew.Std(),
		IdleTimeout:         c.Lease.IdleTimeout.Std(),
		NotLeaderRetryAfter: c.Lease.NotLeaderRetryAfter.Std(),
	}
}

// NewNonceConfig maps the nonce section.
func NewNonceConfig(c *conf.Bootstrap) NonceConfig {
	return NonceConfig{ChainQuery: c.Nonce.ChainQuery.Enabled, StateTimeout: c.Nonce.NonceStateTimeout.Std()}
}

// NewCreateConfig maps the create section.
func NewCreateConfig(c *conf.Bootstrap) CreateConfig {
	limits := domain.DefaultLimits()
	limits.MaxDataBytes = c.Create.MaxDataBytes
	limits.MaxGasLimit = c.Create.MaxGasLimit
	return CreateConfig{Limits: limits, EstimateGas: c.Create.EstimateGas, GasEstimateMultiplier: c.Create.GasEstimateMultiplier}
}
