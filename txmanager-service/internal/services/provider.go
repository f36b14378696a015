package services

import (
	"github.com/google/wire"
)

// ProviderSet is the use-case layer the whole process shares: the node registry, the
// completions feed and retention. Their configurations come from the assembly
// (internal/app), which maps the configuration file onto them.
var ProviderSet = wire.NewSet(
	NewCompletionsUseCase,
	NewStandbyWait,
	NewFinalWait,
	NewRetention,
	NewFeedNotifier,
	NewFeedSequencer,
	NewNodeRegistry,
	NewIncarnation,
	NewAuditTrail,
	NewPolicyBook,
	NewApprovalDesk,
	NewWebhookBook,
	NewWebhookDeliverer,
	NewFundingBook,
	NewAdminRetention,
	wire.InterfaceValue(new(Clock), SystemClock{}),
)

// ChainProviderSet is the use-case layer of one chain: its leases, nonces and use cases,
// built once per served chain.
var ChainProviderSet = wire.NewSet(
	NewLeaseManager,
	NewNonceCache,
	NewCreateTxUseCase,
	NewFundsGuard,
	NewGetTxUseCase,
	NewOpenSigners,
	NewAdminUseCase,
	NewSigningHealth,
	NewSignerConditions,
	NewFundingWatch,
	wire.InterfaceValue(new(Clock), SystemClock{}),
)

// BuildVersion is the running binary's version, set by main.
type BuildVersion string
