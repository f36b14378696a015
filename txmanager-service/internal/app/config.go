package app

import (
	"fmt"
	"time"

	"github.com/google/wire"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/controllers"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/receipts"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/reconcile"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/stuck"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/submitting"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/workers"
	"github.com/bionicotaku/txmanager-service/internal/writer"
)

// The configuration file mapped onto the use cases' and stages' own configurations: the
// layers below the assembly know nothing of the file's shape.

// SharedConfigSet maps what the whole process shares.
var SharedConfigSet = wire.NewSet(newNodeName, newRetentionConfig, newFeedConfig, newNodeConfig, newRouting, newLoopIntervals, newKnownRoles, newWebhookConfig)

// ChainConfigSet maps what one chain's stack needs (from its view of the configuration).
var ChainConfigSet = wire.NewSet(newLoopIntervals, newLeaseConfig, newNonceConfig, newQueueConfig, newPipelineLoopsConfig, newScheduleConfig, newCreateConfig, newFeePolicy, newFundsConfig, newAdminConfig,
	newSubmittingConfig, newReceiptsConfig, newStuckConfig, newReconcileConfig, newStuckHook, newSigningStallConfig, newSignerConditionsConfig)

// newLoopIntervals paces the loops other than the pipeline's.
func newLoopIntervals(c *conf.Bootstrap) workers.Intervals {
	return workers.Intervals{
		LeaseRenew:   c.Lease.RenewInterval.Std(),
		Heartbeat:    c.Routing.HeartbeatInterval.Std(),
		FeedSequence: c.Feed.SequenceInterval.Std(),
		Retention:    c.Retention.Interval.Std(),
		FundsGauge:   c.Create.FundsGaugeInterval.Std(),
		Approvals:    c.Create.ApprovalInterval.Std(),
	}
}

// newRouting maps the routing section for the controllers that forward to a signer's leader.
// newWebhookConfig maps the webhooks section, with the network policy of the environment.
func newWebhookConfig(c *conf.Bootstrap, incarnation services.Incarnation) services.WebhookConfig {
	w := c.Webhooks
	return services.WebhookConfig{Enabled: w.Enabled, Lease: w.Lease.Std(), PassInterval: w.PassInterval.Std(), Timeout: w.Timeout.Std(),
		BackoffMin: w.BackoffMin.Std(), BackoffMax: w.BackoffMax.Std(), DeadAfter: w.DeadAfter.Std(), ClaimsPerPass: w.ClaimsPerPass,
		Network: domain.NetworkPolicy{Allow: w.AllowedPrefixes(c.Environment), AllowHTTP: w.AllowHTTP || c.Environment == conf.EnvironmentDevelopment},
		Owner:   services.LeaseOwner(c.Node.ID, incarnation)}
}

// newKnownRoles are the roles credentials may hold and approval rules may name.
func newKnownRoles(c *conf.Bootstrap) services.KnownRoles { return services.KnownRoles(c.Auth.Roles) }

// newNodeName is this instance's id, as its audit records name it.
func newNodeName(c *conf.Bootstrap) services.NodeName { return services.NodeName(c.Node.ID) }

func newRouting(c *conf.Bootstrap) controllers.Routing {
	return controllers.Routing{Forward: c.Routing.Mode == conf.RoutingForward, MaxHops: c.Routing.MaxHops, RetryWait: 500 * time.Millisecond}
}

func newRetentionConfig(c *conf.Bootstrap) services.RetentionConfig {
	return services.RetentionConfig{Horizon: c.Retention.Horizon.Std(), BatchSize: c.Retention.BatchSize, MaxBatches: c.Retention.MaxBatchesPerPass,
		AuditHorizon: c.Retention.AuditHorizon.Std()}
}

func newFeedConfig(c *conf.Bootstrap) services.FeedConfig {
	return services.FeedConfig{MaxWait: c.Feed.MaxWait.Std(), PollInterval: c.Feed.PollInterval.Std()}
}

// newNodeConfig describes this node for the registry.
func newNodeConfig(c *conf.Bootstrap, incarnation services.Incarnation, version services.BuildVersion, clock services.Clock) services.NodeConfig {
	return services.NodeConfig{
		Self: services.NodeInfo{ID: c.Node.ID, Incarnation: string(incarnation), GRPCAddr: c.AdvertisedGRPCAddr(), HTTPAddr: c.Server.HTTP.Addr,
			Version: string(version), StartedAt: clock.Now().UTC().Truncate(time.Microsecond)},
		Timeout:           c.Routing.NodeTimeout.Std(),
		HeartbeatInterval: c.Routing.HeartbeatInterval.Std(),
	}
}

func newLeaseConfig(c *conf.Bootstrap, incarnation services.Incarnation) services.LeaseConfig {
	return services.LeaseConfig{
		Node:                services.LeaseOwner(c.Node.ID, incarnation),
		Duration:            c.Lease.Duration.Std(),
		RenewInterval:       c.Lease.RenewInterval.Std(),
		Skew:                c.Lease.ClockSkew.Std(),
		IdleTimeout:         c.Lease.IdleTimeout.Std(),
		NotLeaderRetryAfter: c.Lease.NotLeaderRetryAfter.Std(),
	}
}

// newQueueConfig maps the writer section.
func newQueueConfig(c *conf.Bootstrap) writer.QueueConfig {
	return writer.QueueConfig{Workers: c.Writer.Workers, BatchSize: c.Writer.BatchSize, BatchWait: c.Writer.BatchWait.Std(), QueueSize: c.Writer.QueueSize}
}

func newNonceConfig(c *conf.Bootstrap) writer.NonceConfig {
	return writer.NonceConfig{ChainQuery: c.Nonce.ChainQuery.Enabled, StateTimeout: c.Nonce.NonceStateTimeout.Std(),
		AdoptUnknownChainNonces: c.Nonce.UnknownChainNonces == conf.UnknownChainNoncesAdopt,
		RecoverByIntent:         c.Recovery.Mode == conf.RecoveryAdoptByIntent}
}

func newCreateConfig(c *conf.Bootstrap, fees services.FeePolicy) services.CreateConfig {
	limits := domain.DefaultLimits()
	limits.MaxDataBytes = c.Create.MaxDataBytes
	limits.MaxGasLimit = c.Create.MaxGasLimit
	// Checked by the configuration: "" or a positive number of wei.
	limits.NodeTxFeeCap, _ = domain.ParseOptionalWei("fees.nodeTxFeeCap", c.Fees.NodeTxFeeCap)
	return services.CreateConfig{Limits: limits, EstimateGas: c.Create.EstimateGas, SimulateCalls: c.Create.SimulateCalls,
		GasEstimateMultiplier: c.Create.GasEstimateMultiplier, FeeCap: fees.MaxFeeCap}
}

// newFeePolicy maps the fees section: one policy prices first attempts, re-pricing, stuck
// resolutions and the funds check alike.
func newFeePolicy(c *conf.Bootstrap) (services.FeePolicy, error) {
	fees := services.FeePolicy{BumpPercent: c.Fees.BumpPercent, BaseFeeMultiplier: c.Fees.BaseFeeMultiplier}
	var err error
	if fees.MaxFeeCap, err = domain.ParseOptionalWei("fees.maxFeePerGas", c.Fees.MaxFeePerGas); err != nil {
		return services.FeePolicy{}, err
	}
	if fees.MaxTipCap, err = domain.ParseOptionalWei("fees.maxPriorityFeePerGas", c.Fees.MaxPriorityFeePerGas); err != nil {
		return services.FeePolicy{}, err
	}
	if fees.MinTip, err = domain.ParseOptionalWei("fees.minPriorityFeePerGas", c.Fees.MinPriorityFeePerGas); err != nil {
		return services.FeePolicy{}, err
	}
	if fees.NodeTxFeeCap, err = domain.ParseOptionalWei("fees.nodeTxFeeCap", c.Fees.NodeTxFeeCap); err != nil {
		return services.FeePolicy{}, err
	}
	return fees, nil
}

// newFundsConfig maps the create section's funds check; intents without their own fee cap
// are priced as the pipeline would price their first attempt.
func newFundsConfig(c *conf.Bootstrap, fees services.FeePolicy) services.FundsConfig {
	return services.FundsConfig{Check: c.Create.CheckFunds, CacheFor: c.Create.FundsCacheFor.Std(), Fees: fees,
		OPStack: c.Chain.FeeModel == conf.FeeModelOPStack}
}

func newSigningStallConfig(c *conf.Bootstrap) services.SigningStallConfig {
	return services.SigningStallConfig{MaxUnsigned: c.Pipeline.SigningStall.MaxUnsigned, MaxDuration: c.Pipeline.SigningStall.MaxDuration.Std()}
}

func newSignerConditionsConfig(c *conf.Bootstrap) services.SignerConditionsConfig {
	return services.SignerConditionsConfig{RecoverByIntent: c.Recovery.Mode == conf.RecoveryAdoptByIntent}
}

func newAdminConfig(c *conf.Bootstrap) services.AdminConfig {
	return services.AdminConfig{ScanBlocks: c.Nonce.RecoveryScanBlocks, ReleaseWait: c.Recovery.ReleaseWait.Std(),
		RecoverByIntent: c.Recovery.Mode == conf.RecoveryAdoptByIntent}
}

func newSubmittingConfig(c *conf.Bootstrap, fees services.FeePolicy) submitting.Config {
	return submitting.Config{Batch: c.Pipeline.SubmitBatch, SignConcurrency: c.Pipeline.SignConcurrency, ResubmitInterval: c.Resubmit.Interval.Std(), Fees: fees,
		GasEstimateMultiplier: c.Create.GasEstimateMultiplier, MaxGasLimit: c.Create.MaxGasLimit}
}

// newPipelineLoopsConfig maps the loop intervals.
func newPipelineLoopsConfig(c *conf.Bootstrap) workers.PipelineConfig {
	return workers.PipelineConfig{
		SubmitInterval:    c.Pipeline.SubmitInterval.Std(),
		FinalityInterval:  c.Pipeline.FinalityInterval.Std(),
		ResubmitScan:      c.Resubmit.ScanInterval.Std(),
		ResubmitBatch:     c.Resubmit.BatchSize,
		StuckScan:         c.Stuck.ScanInterval.Std(),
		AdoptInterval:     c.Pipeline.AdoptInterval.Std(),
		SignerConcurrency: c.Pipeline.SignerConcurrency,
	}
}

// newScheduleConfig maps how receipts are looked up.
func newScheduleConfig(c *conf.Bootstrap) receipts.ScheduleConfig {
	return receipts.ScheduleConfig{
		PollInterval:        c.Pipeline.Receipts.PollInterval.Std(),
		Workers:             c.Pipeline.Receipts.Workers,
		BatchSize:           c.Pipeline.Receipts.BatchSize,
		MaxBackoff:          c.Pipeline.Receipts.MaxBackoff.Std(),
		BlockScanMinPending: c.Pipeline.Receipts.BlockScanMinPending,
	}
}

func newReceiptsConfig(c *conf.Bootstrap) receipts.Config {
	return receipts.Config{Confirmations: c.Confirmations.Required, UseFinalizedTag: c.Confirmations.UseFinalizedTag}
}

func newStuckConfig(c *conf.Bootstrap, fees services.FeePolicy) stuck.Config {
	return stuck.Config{MinAge: c.Stuck.MinAge.Std(), MinAttempts: c.Stuck.MinAttempts, ResubmitInterval: c.Resubmit.Interval.Std(), Fees: fees}
}

func newReconcileConfig(c *conf.Bootstrap) reconcile.Config {
	return reconcile.Config{
		AdoptUnknownChainNonces: c.Nonce.UnknownChainNonces == conf.UnknownChainNoncesAdopt,
		ScanBlocks:              c.Nonce.RecoveryScanBlocks,
		Confirmations:           c.Confirmations.Required,
		UseFinalizedTag:         c.Confirmations.UseFinalizedTag,
		ResubmitInterval:        c.Resubmit.Interval.Std(),
		FillHoles:               c.Nonce.FillHoles,
		HoleGrace:               c.Nonce.HoleGrace.Std(),
		RecoverByIntent:         c.Recovery.Mode == conf.RecoveryAdoptByIntent,
		AdoptionWindow:          c.Recovery.AdoptionWindow.Std(),
	}
}

// newStuckHook is the shipped policy hook with the configured action. A service embedding
// its own hook replaces this provider.
func newStuckHook(c *conf.Bootstrap) (stuck.Hook, error) {
	action, err := domain.ParseResolutionAction(c.Stuck.Action)
	if err != nil {
		return nil, fmt.Errorf("stuck.action: %w", err)
	}
	return stuck.PolicyHook{Action: action}, nil
}
