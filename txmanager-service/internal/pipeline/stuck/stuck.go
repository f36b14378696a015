package stuck

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// Config sets when the head of line counts as stuck and how a resolution is priced.
type Config struct {
	// MinAge since creation (or since the last resolution) and MinAttempts broadcasts.
	MinAge      time.Duration
	MinAttempts int
	// ResubmitInterval: a resolution's attempt is broadcast again after this long.
	ResubmitInterval time.Duration
	Fees             services.FeePolicy
}

// HeadOfLineTx is a signer's lowest unmined nonce.
type HeadOfLineTx struct {
	TxID           uuid.UUID
	Signer         string
	Nonce          uint64
	State          domain.State
	SubState       domain.SubState
	TxHash         *common.Hash
	SubmitAttempts int
	LastError      string
	CreatedAt      time.Time
	Intent         domain.Intent
	// GasLimit is the one the intent was last signed with, whatever the current attempt
	// is (a cancellation's would not run it again); AdmittedGasLimit the one the create was
	// admitted with (a re-estimate for the L1 part may have raised GasLimit above it).
	GasLimit, AdmittedGasLimit uint64
	// Fees of the current attempt (nil before the first signing).
	MaxFee, MaxTip *big.Int
	// AttemptHashes are every attempt's hashes, the current one's included: an earlier one
	// (the original, or a resolution since outbid) may be what the chain mined.
	AttemptHashes []common.Hash
	PendingDepth  int
	// Since is when it started waiting: creation, or the last resolution claimed for it.
	Since time.Time
}

// Claim claims a stuck transaction for one resolution action.
type Claim struct {
	TxID     uuid.UUID
	Action   domain.ResolutionAction
	NewState domain.State
	SubState domain.SubState
	Reason   string
	// PricedAgainst, with CheckCurrent, is the attempt the resolution's fees outbid (nil:
	// none signed): the claim holds only while it is still the transaction's current one.
	PricedAgainst *common.Hash
	CheckCurrent  bool
}

// Store is the stage's view of the database; ClaimResolution is fenced on the lease and
// yields *domain.FencedError when the lease no longer matches.
type Store interface {
	// Transactions marked STUCK are told to webhook subscribers.
	services.EventAppender
	// HeadOfLine is the signer's lowest unmined transaction (nil when none).
	HeadOfLine(ctx context.Context, signer string) (*HeadOfLineTx, error)
	// Resolvable loads one unmined transaction in the same shape (nil when it is mined,
	// final or unknown).
	Resolvable(ctx context.Context, txID uuid.UUID) (*HeadOfLineTx, error)
	// ClaimResolution records the claim with its audit row; false when the transaction is
	// already in that state or no longer unmined.
	ClaimResolution(ctx context.Context, lease domain.Lease, claim Claim) (bool, error)
}

// Resolver runs the stage.
type Resolver struct {
	cfg         Config
	store       Store
	attempts    pipeline.AttemptStore
	chain       Chain
	signer      *pipeline.Signer
	broadcaster *pipeline.Broadcaster
	leases      *services.LeaseManager
	hook        Hook
	// signing learns from a resolution's signature whether the signer's key source signs:
	// after an operator cancelled the one transaction the key refused, nothing else may be
	// left for the submitter to sign, and the signer would stay refused for a failure that
	// is over.
	signing *services.SigningHealth
	clock   services.Clock
	metrics *telemetry.Metrics
	log     *log.Helper
	// attemptRecorded runs after a resolution recorded a new attempt (a replacement or a
	// cancellation), whether the pipeline or an operator decided it.
	attemptRecorded func()
}

// OnAttemptRecorded sets what runs after a resolution recorded a new attempt: the receipt
// schedule learns the new hash from it. Call before the stage runs.
func (r *Resolver) OnAttemptRecorded(fn func()) { r.attemptRecorded = fn }

// New builds the stage.
// Chain is what the stage asks the node: the fees to bump to, and the gas of the
// self-transfer a cancellation puts at a nonce (services.TransferGas).
type Chain interface {
	services.FeeSource
	services.GasEstimator
}

func New(cfg Config, store Store, attempts pipeline.AttemptStore, chain Chain, signer *pipeline.Signer, broadcaster *pipeline.Broadcaster,
	leases *services.LeaseManager, hook Hook, signing *services.SigningHealth, clock services.Clock, metrics *telemetry.Metrics, logger log.Logger) *Resolver {
	return &Resolver{cfg: cfg, store: store, attempts: attempts, chain: chain, signer: signer, broadcaster: broadcaster, leases: leases, hook: hook,
		signing: signing, clock: clock, metrics: metrics, log: log.NewHelper(log.With(logger, "component", "pipeline", "node_id", leases.Node()))}
}

// DetectStuck looks at the signer's lowest unmined nonce and, past the thresholds, asks the
// hook and carries its decision out. A transaction already marked STUCK (NOOP) is left
// alone until a receipt arrives or an operator acts.
func (r *Resolver) DetectStuck(ctx context.Context, lease domain.Lease) (bool, error) {
	ctx, span := pipeline.Span(ctx, r.metrics, "pipeline.stuck", lease)
	defer span.End()
	head, err := r.store.HeadOfLine(ctx, lease.Signer)
	if err != nil || head == nil {
		return false, err
	}
	if services.StepAfter(head.SubState) == services.StepCancel {
		// No node takes it as signed: waiting cannot help, and every nonce after it waits
		// on it. A cancellation takes the nonce whatever the hook would decide.
		return true, r.resolve(ctx, lease, head, Decision{Action: domain.ActionCancel,
			Reason: "no node takes the transaction as signed: " + head.LastError}, false)
	}
	if !isStuck(head, r.clock.Now(), r.cfg) {
		return false, nil
	}
	if head.SubState == domain.SubStateL1GasShort && !head.Since.After(head.CreatedAt) {
		// Waited past the thresholds for the L1 price to let its gas limit in. A limit the
		// L1 part never fits (a plain 21000 on Arbitrum) would otherwise hold every nonce
		// after it until a person came; a cancellation is priced by the node's estimate.
		// Once only: a resolution claimed before (Since moved past creation) that is still
		// short goes to the hook, so a cancellation the L1 part does not fit either is not
		// sent again every MinAge without a person hearing of it.
		return true, r.resolve(ctx, lease, head, Decision{Action: domain.ActionCancel,
			Reason: "the node counted the L1 part of the cost above the gas limit until the stuck thresholds: " + head.LastError}, false)
	}
	decision, err := r.hook.Decide(ctx, caseOf(head, r.clock.Now(), false))
	if err != nil {
		return false, fmt.Errorf("stuck hook: %w", err)
	}
	return true, r.resolve(ctx, lease, head, decision, false)
}

// isStuck: a head of line not already marked STUCK that has waited at least MinAge and
// been broadcast at least MinAttempts times.
func isStuck(head *HeadOfLineTx, now time.Time, cfg Config) bool {
	return head != nil && head.State != domain.StateStuck && now.Sub(head.Since) >= cfg.MinAge && head.SubmitAttempts >= cfg.MinAttempts
}

// ResolveTx resolves one transaction now (admin API). This node must hold the signer's
// lease; the action defaults to the hook's decision.
func (r *Resolver) ResolveTx(ctx context.Context, txID uuid.UUID, action domain.ResolutionAction, reason string) (domain.ResolutionAction, error) {
	head, err := r.store.Resolvable(ctx, txID)
	if err != nil {
		return "", err
	}
	if head == nil {
		return "", fmt.Errorf("%w: no unmined transaction %s", domain.ErrNotFound, txID)
	}
	lease, err := r.leases.Acquire(ctx, head.Signer)
	if err != nil {
		return "", err
	}
	decision := Decision{Action: action, Reason: reason}
	if head.State == domain.StateAllocated {
		// Never signed: its key source refuses it (or has not got to it). Only a
		// transaction of its own at the nonce, a 0-value self-transfer, lets the nonces after
		// it through; NOOP would leave the nonce empty for good and REPLACE asks the key
		// source for the same signature again.
		switch action {
		case "":
			decision.Action = domain.ActionCancel
		case domain.ActionCancel, domain.ActionPlaceholder:
		default:
			return "", &domain.ValidationError{Field: "action", Reason: fmt.Sprintf("transaction %s was never signed: only CANCEL or PLACEHOLDER (a 0-value self-transfer at its nonce) resolves it", txID)}
		}
	} else if action == "" {
		if decision, err = r.hook.Decide(ctx, caseOf(head, r.clock.Now(), true)); err != nil {
			return "", fmt.Errorf("stuck hook: %w", err)
		}
	}
	if decision.Reason == "" {
		decision.Reason = "manual resolution requested through the admin API"
	}
	return decision.Action, r.resolve(ctx, lease, head, decision, true)
}

func caseOf(h *HeadOfLineTx, now time.Time, manual bool) Case {
	return Case{
		Signer: h.Signer, TxID: h.TxID, Nonce: h.Nonce, TxHash: h.TxHash, State: h.State, SubmitAttempts: h.SubmitAttempts,
		LastError: h.LastError, Age: now.Sub(h.CreatedAt), PendingDepth: h.PendingDepth, Manual: manual,
	}
}

// claimFor is the claim a decision makes. An action that needs an attempt gets it built
// first (attemptErr is how that went): when no fee within the caps can replace the stuck
// attempt, the transaction is marked STUCK instead of claiming an action that cannot
// happen (fallback).
func claimFor(head *HeadOfLineTx, decision Decision, attemptErr error) (claim Claim, fallback bool, err error) {
	claim = Claim{TxID: head.TxID, Action: decision.Action, Reason: decision.Reason}
	switch decision.Action {
	case domain.ActionNoop:
		claim.NewState, claim.SubState = domain.StateStuck, domain.SubStateNoop
	case domain.ActionCancel, domain.ActionPlaceholder, domain.ActionReplace:
		if errors.Is(attemptErr, services.ErrFeeCapReached) {
			claim.NewState, claim.SubState = domain.StateStuck, domain.SubStateNoop
			claim.Reason = decision.Reason + "; " + attemptErr.Error()
			return claim, true, nil
		}
		if attemptErr != nil {
			return Claim{}, false, attemptErr
		}
		claim.NewState, claim.SubState = domain.StateTracking, domain.SubStateResolving(decision.Action)
	default:
		return Claim{}, false, fmt.Errorf("stuck hook returned unknown action %q", decision.Action)
	}
	return claim, false, nil
}

// needsAttempt: the action puts a new transaction at the stuck nonce.
func needsAttempt(action domain.ResolutionAction) bool {
	return action == domain.ActionCancel || action == domain.ActionPlaceholder || action == domain.ActionReplace
}

// resolve carries a decision out: a fenced, audited claim first; only then any signing and
// broadcasting. An operator's request (manual) that no fee within the caps can carry out
// is answered with the reason, not marked STUCK again as if it had been done.
func (r *Resolver) resolve(ctx context.Context, lease domain.Lease, head *HeadOfLineTx, decision Decision, manual bool) error {
	var (
		attempt    pipeline.SignedAttempt
		attemptErr error
	)
	if needsAttempt(decision.Action) {
		attempt, attemptErr = r.resolutionAttempt(ctx, lease, head, decision.Action)
	}
	if manual && errors.Is(attemptErr, services.ErrFeeCapReached) {
		return &domain.ValidationError{Field: "action", Reason: fmt.Sprintf("%s needs a transaction that replaces the one at nonce %d, and no fee within the caps does: %v",
			decision.Action, head.Nonce, attemptErr)}
	}
	claim, fallback, err := claimFor(head, decision, attemptErr)
	if err != nil {
		return err
	}
	// The stage's own decision holds only over the attempt it priced against: a re-pricing
	// resubmission stored since outbids it, and the next pass decides again. An operator's
	// decision is carried out as asked; a replacement refused as underpriced is outbid.
	claim.PricedAgainst, claim.CheckCurrent = head.TxHash, !manual
	claimed, err := r.store.ClaimResolution(ctx, lease, claim)
	if err != nil {
		return r.leases.Fence(ctx, lease, err)
	}
	if !claimed {
		return nil // already in this state (repeated decision) or no longer unmined
	}
	action := decision.Action
	if fallback {
		action = domain.ActionNoop
	}
	r.metrics.Stuck(ctx, strings.ToLower(string(action)))
	fields := []any{"msg", "stuck transaction", "signer", lease.Signer, "tx_id", head.TxID.String(), "nonce", head.Nonce,
		"action", string(action), "fencing_token", lease.Token, "reason", claim.Reason, "state", string(claim.NewState)}
	if action == domain.ActionNoop {
		// Alert level: a head-of-line nonce is blocking the signer and nobody will fix it
		// automatically.
		r.log.WithContext(ctx).Errorw(fields...)
		services.RecordEvent(ctx, r.store, r.log, services.SignerEvent(domain.EventStuck, 0, common.HexToAddress(lease.Signer),
			map[string]any{"signer": lease.Signer, "txId": head.TxID.String(), "nonce": head.Nonce, "reason": claim.Reason, "submitAttempts": head.SubmitAttempts}))
		return nil
	}
	r.log.WithContext(ctx).Warnw(fields...)
	subState := domain.SubStateResolutionSubmitted(decision.Action)
	var recorded bool
	if manual {
		recorded, err = r.attempts.RecordAttempt(ctx, lease, attempt, subState, r.cfg.ResubmitInterval)
	} else {
		recorded, err = r.attempts.RecordResolution(ctx, lease, attempt, head.TxHash, subState, r.cfg.ResubmitInterval)
	}
	if err != nil {
		return r.leases.Fence(ctx, lease, err)
	}
	if !recorded {
		// Mined meanwhile, or (the stage's own decision) re-priced between the claim and
		// now: it was not stored and is not sent; the next pass decides again.
		return nil
	}
	if r.attemptRecorded != nil {
		r.attemptRecorded()
	}
	// Any attempt of ours mined at the nonce makes "nonce too low" our own outcome, not a
	// foreign transaction's: the receipts stage then finds which one.
	ours := append([]common.Hash{attempt.Hash}, head.AttemptHashes...)
	if head.TxHash != nil && !slices.Contains(ours, *head.TxHash) {
		ours = append(ours, *head.TxHash)
	}
	_, err = r.broadcaster.Broadcast(ctx, lease, []pipeline.BroadcastItem{{TxID: head.TxID, Raw: attempt.Raw, Ours: ours}})
	return err
}

// resolutionAttempt signs the attempt an action needs at the stuck nonce.
func (r *Resolver) resolutionAttempt(ctx context.Context, lease domain.Lease, head *HeadOfLineTx, action domain.ResolutionAction) (pipeline.SignedAttempt, error) {
	suggestion, err := r.chain.SuggestFees(ctx)
	if err != nil {
		return pipeline.SignedAttempt{}, &domain.UnavailableError{Reason: "fee suggestion", RetryAfter: time.Second, Err: err}
	}
	u, kind := resolutionTx(head, action)
	if action != domain.ActionReplace {
		u.Gas = services.TransferGas(ctx, r.chain, u.From, *u.To)
	}
	// The caps every attempt keeps: the node's on one transaction's fee, and for the intent
	// again (REPLACE) the fees its client named and the gas it was admitted with, which its
	// admission was judged by.
	policy := r.cfg.Fees.ForGasLimit(u.Gas)
	if action == domain.ActionReplace {
		// Its worst-case fee within what it was admitted with, whatever limit it carries now.
		policy = policy.CappedBy(head.Intent.MaxFeePerGas, head.Intent.MaxPriorityFeePerGas).ForAdmittedGas(head.AdmittedGasLimit, u.Gas)
	}
	maxFee, maxTip, err := resolutionFees(policy, head, suggestion)
	if err != nil {
		return pipeline.SignedAttempt{}, err
	}
	u.MaxFee, u.MaxTip, u.Legacy, u.BaseFee = maxFee, maxTip, suggestion.Legacy, suggestion.BaseFee
	attempt, err := r.signer.Sign(ctx, head.TxID, kind, u)
	r.signing.Observe(ctx, lease, err)
	return attempt, err
}

// resolutionFees prices a transaction put at a stuck nonce. Where no node took anything of
// ours there (never signed, or refused by every node as not mineable or short of its L1
// part) there is nothing to replace: a fresh attempt's fees. Otherwise it must outbid the
// current attempt by the replacement rule, within the caps and, without caps, at most a few
// times the market (Outbid): resolutions repeated round after round do not compound the
// fees. No room under the caps is ErrFeeCapReached.
func resolutionFees(policy services.FeePolicy, head *HeadOfLineTx, suggestion services.FeeSuggestion) (maxFee, maxTip *big.Int, err error) {
	if head.MaxFee == nil || head.MaxTip == nil || head.SubState == domain.SubStateNotMineable || head.SubState == domain.SubStateL1GasShort {
		maxFee, maxTip, err = policy.Initial(domain.Intent{}, suggestion)
		return maxFee, maxTip, err
	}
	maxFee, maxTip, action := policy.Outbid(head.MaxFee, head.MaxTip, suggestion)
	if action == services.AtFeeCap {
		return nil, nil, fmt.Errorf("%w: a replacement of max fee %s and tip %s must outbid them, above the caps", services.ErrFeeCapReached,
			head.MaxFee, head.MaxTip)
	}
	return maxFee, maxTip, nil
}

// resolutionTx is the transaction an action puts at the stuck nonce (fees left to the
// caller): the intent again for REPLACE, a 0-value self-transfer for CANCEL and
// PLACEHOLDER.
func resolutionTx(head *HeadOfLineTx, action domain.ResolutionAction) (pipeline.Unsigned, pipeline.AttemptKind) {
	from := common.HexToAddress(head.Signer)
	u := pipeline.Unsigned{From: from, Nonce: head.Nonce, To: &from, Value: new(big.Int), Gas: services.PlainTransferGas}
	switch action {
	case domain.ActionReplace:
		u.To, u.Value, u.Data, u.Gas = head.Intent.To, head.Intent.Value, head.Intent.Data, head.GasLimit
		return u, pipeline.AttemptReplace
	case domain.ActionPlaceholder:
		return u, pipeline.AttemptPlaceholder
	default:
		return u, pipeline.AttemptCancel
	}
}
