package services

import (
	"fmt"
	"time"

	"github.com/google/wire"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// ProviderSet is the use-case layer the whole process shares: the node registry, the
// completions feed and retention.
var ProviderSet = wire.NewSet(
	NewCompletionsUseCase,
	NewFinalWait,
	NewFeedConfig,
	NewRetentionConfig,
	NewRetention,
	NewFeedNotifier,
	NewFeedSequencer,
	NewNodeConfig,
	NewNodeRegistry,
	NewIncarnation,
	wire.InterfaceValue(new(Clock), SystemClock{}),
)

// ChainProviderSet is the use-case layer of one chain: its leases, nonces, pipeline and
// use cases, built once per served chain.
var ChainProviderSet = wire.NewSet(
	NewLeaseConfig,
	NewNonceConfig,
	NewCreateConfig,
	NewLeaseManager,
	NewNonceCache,
	NewAllocator,
	NewCreateTxUseCase,
	NewFundsConfig,
	NewFundsGuard,
	NewGetTxUseCase,
	NewPipelineConfig,
	NewStuckHook,
	NewPipeline,
	NewAdminUseCase,
	wire.InterfaceValue(new(Clock), SystemClock{}),
)

// NewRetentionConfig maps the retention section.
func NewRetentionConfig(c *conf.Bootstrap) RetentionConfig {
	return RetentionConfig{Horizon: c.Retention.Horizon.Std(), BatchSize: c.Retention.BatchSize, MaxBatches: c.Retention.MaxBatchesPerPass}
}

// NewFeedConfig maps the feed section.
func NewFeedConfig(c *conf.Bootstrap) FeedConfig {
	return FeedConfig{MaxWait: c.Feed.MaxWait.Std(), PollInterval: c.Feed.PollInterval.Std()}
}

// NewPipelineConfig maps the pipeline, confirmations, resubmit, stuck and fees sections.
func NewPipelineConfig(c *conf.Bootstrap) (PipelineConfig, error) {
	fees := FeePolicy{BumpPercent: c.Fees.BumpPercent, BaseFeeMultiplier: c.Fees.BaseFeeMultiplier}
	var err error
	if fees.MaxFeeCap, err = domain.ParseOptionalWei("fees.maxFeePerGas", c.Fees.MaxFeePerGas); err != nil {
		return PipelineConfig{}, err
	}
	if fees.MaxTipCap, err = domain.ParseOptionalWei("fees.maxPriorityFeePerGas", c.Fees.MaxPriorityFeePerGas); err != nil {
		return PipelineConfig{}, err
	}
	return PipelineConfig{
		SubmitBatch:      c.Pipeline.SubmitBatch,
		ResubmitInterval: c.Resubmit.Interval.Std(),
		Confirmations:    c.Confirmations.Required,
		UseFinalizedTag:  c.Confirmations.UseFinalizedTag,
		Fees:             fees,
		Stuck:            StuckConfig{MinAge: c.Stuck.MinAge.Std(), MinAttempts: c.Stuck.MinAttempts},
		Holes:            HoleConfig{Fill: c.Nonce.FillHoles, Grace: c.Nonce.HoleGrace.Std()},
		Recovery: RecoveryConfig{AdoptUnknownChainNonces: c.Nonce.UnknownChainNonces == conf.UnknownChainNoncesAdopt,
			ScanBlocks: c.Nonce.RecoveryScanBlocks},
	}, nil
}

// NewStuckHook is the shipped policy hook with the configured action. Services embedding
// their own hook replace this provider.
func NewStuckHook(c *conf.Bootstrap) (StuckResolutionHook, error) {
	action, err := domain.ParseResolutionAction(c.Stuck.Action)
	if err != nil {
		return nil, fmt.Errorf("stuck.action: %w", err)
	}
	return PolicyHook{Action: action}, nil
}

// NewLeaseConfig maps the lease section.
func NewLeaseConfig(c *conf.Bootstrap, incarnation Incarnation) LeaseConfig {
	return LeaseConfig{
		Node:                LeaseOwner(c.Node.ID, incarnation),
		Duration:            c.Lease.Duration.Std(),
		RenewInterval:       c.Lease.RenewInterval.Std(),
		Skew:                c.Lease.ClockSkew.Std(),
		IdleTimeout:         c.Lease.IdleTimeout.Std(),
		NotLeaderRetryAfter: c.Lease.NotLeaderRetryAfter.Std(),
	}
}

// NewNonceConfig maps the nonce section.
func NewNonceConfig(c *conf.Bootstrap) NonceConfig {
	return NonceConfig{ChainQuery: c.Nonce.ChainQuery.Enabled, StateTimeout: c.Nonce.NonceStateTimeout.Std(),
		AdoptUnknownChainNonces: c.Nonce.UnknownChainNonces == conf.UnknownChainNoncesAdopt}
}

// NewCreateConfig maps the create section.
func NewCreateConfig(c *conf.Bootstrap) CreateConfig {
	limits := domain.DefaultLimits()
	limits.MaxDataBytes = c.Create.MaxDataBytes
	limits.MaxGasLimit = c.Create.MaxGasLimit
	return CreateConfig{Limits: limits, EstimateGas: c.Create.EstimateGas, SimulateCalls: c.Create.SimulateCalls, GasEstimateMultiplier: c.Create.GasEstimateMultiplier}
}

// NewFundsConfig maps the create section's funds check; intents without their own fee cap
// are priced as the pipeline would price their first attempt.
func NewFundsConfig(c *conf.Bootstrap, pipeline PipelineConfig) FundsConfig {
	return FundsConfig{Check: c.Create.CheckFunds, CacheFor: c.Create.FundsCacheFor.Std(), Fees: pipeline.Fees}
}

// BuildVersion is the running binary's version, set by main.
type BuildVersion string

// NewNodeConfig describes this node for the registry.
func NewNodeConfig(c *conf.Bootstrap, incarnation Incarnation, version BuildVersion, clock Clock) NodeConfig {
	return NodeConfig{
		Self: NodeInfo{ID: c.Node.ID, Incarnation: string(incarnation), GRPCAddr: c.AdvertisedGRPCAddr(), HTTPAddr: c.Server.HTTP.Addr, Version: string(version),
			StartedAt: clock.Now().UTC().Truncate(time.Microsecond)},
		Timeout:           c.Routing.NodeTimeout.Std(),
		HeartbeatInterval: c.Routing.HeartbeatInterval.Std(),
	}
}
