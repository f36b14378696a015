package workers

import (
	"context"
	"time"

	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/wire"

	"github.com/bionicotaku/txmanager-service/internal/services"
)

// ProviderSet is the background loops of the whole process.
var ProviderSet = wire.NewSet(
	NewNodeHeartbeat,
	NewFeedSequencerLoop,
	NewRetentionLoop,
	NewRosterLoop,
	NewApprovalLoop,
	NewWebhookLoop,
)

// ChainProviderSet is the background loops of one chain.
var ChainProviderSet = wire.NewSet(
	NewLeaseKeeper,
	wire.Struct(new(PipelineStages), "*"),
	NewPipelineWorkers,
	wire.Bind(new(services.SubmitNotifier), new(*PipelineWorkers)),
	NewFundsGaugeLoop,
	NewFundingLoop,
)

// Intervals pace the loops other than the pipeline's (the assembly maps them from the
// configuration file).
type Intervals struct {
	LeaseRenew   time.Duration
	Heartbeat    time.Duration
	FeedSequence time.Duration
	Retention    time.Duration
	FundsGauge   time.Duration
	Approvals    time.Duration
}

// LeaseKeeper renews in-use leases, releases idle ones and applies local fencing every
// renew interval.
type LeaseKeeper struct{ *Loop }

// NewLeaseKeeper builds the keeper, which runs every lease renew interval.
func NewLeaseKeeper(c Intervals, leases *services.LeaseManager) *LeaseKeeper {
	return &LeaseKeeper{boundedLoop(c.LeaseRenew, leases.Tick)}
}

// NodeHeartbeat keeps this node's registry entry fresh.
type NodeHeartbeat struct{ *Loop }

// NewNodeHeartbeat beats every heartbeat interval.
func NewNodeHeartbeat(c Intervals, nodes *services.NodeRegistry) *NodeHeartbeat {
	return &NodeHeartbeat{boundedLoop(c.Heartbeat, nodes.Heartbeat)}
}

// boundedLoop runs pass every interval, each pass cut off at the interval so that a slow
// database never lets passes pile up behind one another.
func boundedLoop(interval time.Duration, pass func(context.Context)) *Loop {
	return NewLoop(interval, func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, interval)
		defer cancel()
		pass(ctx)
	})
}

// RosterLoop applies the signer roster on this node every signers.rosterPollInterval.
type RosterLoop struct{ *Loop }

// rosterPassTimeout bounds one roster pass; each key source it builds has its own deadline.
const rosterPassTimeout = time.Minute

// NewRosterLoop builds the loop.
func NewRosterLoop(roster *services.SignerRoster, logger log.Logger) *RosterLoop {
	helper := log.NewHelper(log.With(logger, "component", "signer-roster"))
	return &RosterLoop{NewLoop(roster.Interval(), func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, rosterPassTimeout)
		defer cancel()
		if err := roster.Sync(ctx); err != nil && ctx.Err() == nil {
			helper.Warnw("msg", "signer roster pass failed", "error", err.Error())
		}
	})}
}
