package services

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// StuckContext is what a hook sees of a stuck transaction.
type StuckContext struct {
	Signer         string
	TxID           uuid.UUID
	Nonce          uint64
	TxHash         *common.Hash
	State          domain.State
	SubmitAttempts int
	LastError      string
	Age            time.Duration
	PendingDepth   int
	// Manual is true when an operator asked for the resolution through the admin API.
	Manual bool
}

// ResolutionDecision is a hook's answer.
type ResolutionDecision struct {
	Action domain.ResolutionAction
	// Reason is recorded in the audit trail and the logs.
	Reason string
}

// StuckResolutionHook decides what to do about a stuck head-of-line transaction. It may be
// called again for the same transaction; the system claims (fenced) before acting, so a
// repeated decision never doubles a chain side effect.
type StuckResolutionHook interface {
	Decide(ctx context.Context, stuck StuckContext) (ResolutionDecision, error)
}

// PolicyHook always answers with one configured action (NOOP by default).
type PolicyHook struct {
	Action domain.ResolutionAction
}

// Decide implements StuckResolutionHook.
func (h PolicyHook) Decide(_ context.Context, stuck StuckContext) (ResolutionDecision, error) {
	action := h.Action
	if action == "" {
		action = domain.ActionNoop
	}
	return ResolutionDecision{Action: action, Reason: fmt.Sprintf("policy %s: head of line for %s after %d attempts", action, stuck.Age.Round(time.Second), stuck.SubmitAttempts)}, nil
}

// StuckConfig sets when the head of line counts as stuck.
type StuckConfig struct {
	// MinAge since creation (or since the last resolution) and MinAttempts broadcasts.
	MinAge      time.Duration
	MinAttempts int
}

// DetectStuck looks at the signer's lowest unmined nonce and, past the thresholds, asks the
// hook and carries its decision out. A transaction already marked STUCK (NOOP) is left
// alone until a receipt arrives or an operator acts.
func (p *Pipeline) DetectStuck(ctx context.Context, lease domain.Lease) (bool, error) {
	ctx, span := p.span(ctx, "pipeline.stuck", lease)
	defer span.End()
	head, err := p.store.HeadOfLine(ctx, lease.Signer)
	if err != nil || head == nil || head.State == domain.StateStuck {
		return false, err
	}
	age := p.clock.Now().Sub(head.Since)
	if age < p.cfg.Stuck.MinAge || head.SubmitAttempts < p.cfg.Stuck.MinAttempts {
		return false, nil
	}
	decision, err := p.hook.Decide(ctx, stuckContext(head, p.clock.Now(), false))
	if err != nil {
		return false, fmt.Errorf("stuck hook: %w", err)
	}
	return true, p.resolve(ctx, lease, head, decision)
}

// ResolveTx resolves one transaction now (admin API). This node must hold the signer's
// lease; the action defaults to the hook's decision.
func (p *Pipeline) ResolveTx(ctx context.Context, txID uuid.UUID, action domain.ResolutionAction, reason string) (domain.ResolutionAction, error) {
	head, err := p.store.Resolvable(ctx, txID)
	if err != nil {
		return "", err
	}
	if head == nil {
		return "", fmt.Errorf("%w: no unmined transaction %s", domain.ErrNotFound, txID)
	}
	lease, err := p.leases.Acquire(ctx, head.Signer)
	if err != nil {
		return "", err
	}
	decision := ResolutionDecision{Action: action, Reason: reason}
	if action == "" {
		if decision, err = p.hook.Decide(ctx, stuckContext(head, p.clock.Now(), true)); err != nil {
			return "", fmt.Errorf("stuck hook: %w", err)
		}
	}
	if decision.Reason == "" {
		decision.Reason = "manual resolution requested through the admin API"
	}
	return decision.Action, p.resolve(ctx, lease, head, decision)
}

func stuckContext(h *HeadOfLineTx, now time.Time, manual bool) StuckContext {
	return StuckContext{
		Signer: h.Signer, TxID: h.TxID, Nonce: h.Nonce, TxHash: h.TxHash, State: h.State, SubmitAttempts: h.SubmitAttempts,
		LastError: h.LastError, Age: now.Sub(h.CreatedAt), PendingDepth: h.PendingDepth, Manual: manual,
	}
}

// resolve carries a decision out: a fenced, audited claim first; only then any signing and
// broadcasting.
func (p *Pipeline) resolve(ctx context.Context, lease domain.Lease, head *HeadOfLineTx, decision ResolutionDecision) error {
	var (
		attempt  *SignedAttempt
		err      error
		claim    = StuckClaim{TxID: head.TxID, Action: decision.Action, Reason: decision.Reason}
		fallback = false
	)
	switch decision.Action {
	case domain.ActionNoop:
		claim.NewState, claim.SubState = domain.StateStuck, string(domain.ActionNoop)
	case domain.ActionCancel, domain.ActionPlaceholder, domain.ActionReplace:
		// Build the attempt before claiming: if no fee within the caps can replace the stuck
		// attempt, the transaction is marked STUCK instead of claiming an action that
		// cannot happen.
		attempt, err = p.resolutionAttempt(ctx, head, decision.Action)
		if errors.Is(err, ErrFeeCapReached) {
			claim.NewState, claim.SubState, fallback = domain.StateStuck, string(domain.ActionNoop), true
			claim.Reason = decision.Reason + "; " + err.Error()
			break
		}
		if err != nil {
			return err
		}
		claim.NewState, claim.SubState = domain.StateTracking, "RESOLVING_"+string(decision.Action)
	default:
		return fmt.Errorf("stuck hook returned unknown action %q", decision.Action)
	}
	claimed, err := p.store.ClaimStuckResolution(ctx, lease, claim)
	if err != nil {
		return p.fenced(ctx, lease, err)
	}
	if !claimed {
		return nil // already in this state (repeated decision) or no longer unmined
	}
	action := decision.Action
	if fallback {
		action = domain.ActionNoop
	}
	p.metrics.Stuck(ctx, strings.ToLower(string(action)))
	fields := []any{"msg", "stuck transaction", "signer", lease.Signer, "tx_id", head.TxID.String(), "nonce", head.Nonce,
		"action", string(action), "fencing_token", lease.Token, "reason", claim.Reason, "state", string(claim.NewState)}
	if action == domain.ActionNoop {
		// Alert level: a head-of-line nonce is blocking the signer and nobody will fix it
		// automatically.
		p.log.WithContext(ctx).Errorw(fields...)
		return nil
	}
	p.log.WithContext(ctx).Warnw(fields...)
	if err := p.store.RecordAttempt(ctx, lease, *attempt, string(decision.Action)+"_SUBMITTED", p.cfg.ResubmitInterval); err != nil {
		return p.fenced(ctx, lease, err)
	}
	ours := []common.Hash{attempt.Hash}
	if head.TxHash != nil {
		ours = append(ours, *head.TxHash)
	}
	_, err = p.broadcast(ctx, lease, []broadcastItem{{TxID: head.TxID, Raw: attempt.Raw, Ours: ours}})
	return err
}

// resolutionAttempt signs the attempt an action needs at the stuck nonce.
func (p *Pipeline) resolutionAttempt(ctx context.Context, head *HeadOfLineTx, action domain.ResolutionAction) (*SignedAttempt, error) {
	suggestion, err := p.chain.SuggestFees(ctx)
	if err != nil {
		return nil, &domain.UnavailableError{Reason: "fee suggestion", RetryAfter: time.Second, Err: err}
	}
	maxFee, maxTip := head.MaxFee, head.MaxTip
	if maxFee == nil || maxTip == nil {
		maxFee, maxTip = new(big.Int), new(big.Int)
	}
	if maxFee, maxTip, err = p.cfg.Fees.Bump(maxFee, maxTip, suggestion); err != nil {
		return nil, err
	}
	from := common.HexToAddress(head.Signer)
	to, value, data, gas, kind := &from, new(big.Int), []byte(nil), uint64(21_000), AttemptCancel
	switch action {
	case domain.ActionReplace:
		to, value, data, gas, kind = head.Intent.To, head.Intent.Value, head.Intent.Data, head.GasLimit, AttemptReplace
	case domain.ActionPlaceholder:
		kind = AttemptPlaceholder
	}
	signed, raw, err := p.sign(ctx, from, head.Nonce, to, value, data, gas, maxFee, maxTip, suggestion.Legacy)
	if err != nil {
		return nil, err
	}
	return &SignedAttempt{TxID: head.TxID, Hash: signed.Hash(), Nonce: head.Nonce, Kind: kind, MaxFee: maxFee, MaxTip: maxTip, GasLimit: gas, Raw: raw}, nil
}
