package writer

import (
	"context"
	"fmt"
	"math/big"
	"slices"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// policyGate checks a signer's part of a batch against the spending policies that bind it:
// the signer's own and those of the credentials its creates came with, read and locked inside
// the batch's fenced transaction. Windowed policies are locked FOR UPDATE, so every node's
// admissions under one scope take turns and each sees the totals the one before committed;
// the gate adds each admitted create to its running totals, so a later create of the same
// batch sees it too.
type policyGate struct {
	policies []domain.VersionedPolicy
	totals   map[services.WindowKey]domain.WindowTotals
	spent    map[domain.PolicyScope]*services.PolicySpend
	order    []domain.PolicyScope
	denied   []denial
	// refuseAll, when set, refuses every new create (a paused signer).
	refuseAll error
	// approved are the batch's approved intents still open for admission, locked until the
	// batch commits, with the rule each was approved under.
	approved map[uuid.UUID]services.ApprovedGrant
}

type denial struct {
	rule  string
	scope domain.PolicyScopeKind
}

// policyGate loads the gate for b, nil when no policy binds it and it admits no approved
// intent (the common case costs the one look-up).
func (a *Allocator) policyGate(ctx context.Context, sess txmanager.Session, b *signerBatch) (*policyGate, error) {
	policies, err := a.store.PoliciesForAdmission(ctx, sess, b.key, b.credentials())
	if err != nil {
		return nil, err
	}
	approvals := b.approvalIDs()
	if len(policies) == 0 && len(approvals) == 0 {
		return nil, nil
	}
	g := &policyGate{policies: policies, spent: map[domain.PolicyScope]*services.PolicySpend{}, approved: map[uuid.UUID]services.ApprovedGrant{}}
	if len(approvals) > 0 {
		open, err := a.store.LockApproved(ctx, sess, approvals)
		if err != nil {
			return nil, err
		}
		for _, grant := range open {
			g.approved[grant.ID] = grant
		}
	}
	var keys []services.WindowKey
	for _, p := range policies {
		for _, w := range p.Policy.Windows {
			keys = append(keys, services.WindowKey{Scope: p.Scope, Minutes: int64(w.Period.Minutes())})
		}
	}
	if len(keys) > 0 {
		if g.totals, err = a.store.WindowTotals(ctx, sess, keys); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// admit checks op against every policy binding it. An op a policy sends for approval is
// answered with the need (nothing counted: it is counted when admitted); an admitted op is
// added to the totals. An op admitting an approved intent skips the approval rule, and is
// refused unless its approval is still APPROVED and unexpired.
func (g *policyGate) admit(op *Op) (*approvalNeed, error) {
	if g == nil {
		return nil, nil
	}
	if g.refuseAll != nil {
		return nil, g.refuseAll
	}
	approval := op.Request.Admission.ApprovalID
	grant, open := g.approved[approval]
	if approval != uuid.Nil && !open {
		return nil, fmt.Errorf("%w: approval %s is no longer approved and unexpired", domain.ErrApprovalClosed, approval)
	}
	check := g.check(op)
	binding := g.binding(op)
	for _, p := range binding {
		if rule, detail := p.Policy.CheckIntent(check); rule != "" {
			return nil, g.deny(p, rule, detail)
		}
		for _, w := range p.Policy.Windows {
			if rule, detail := w.CheckWindow(check, g.total(p.Scope, w)); rule != "" {
				return nil, g.deny(p, rule, detail)
			}
		}
	}
	// The first binding policy that asks for approval decides who approves (the signer's own
	// before the credential's).
	var need *approvalNeed
	for _, p := range binding {
		if reason := p.Policy.NeedsApproval(check); reason != "" {
			need = &approvalNeed{policy: p, reason: reason}
			break
		}
	}
	if approval == uuid.Nil && need != nil {
		return need, nil
	}
	if approval != uuid.Nil {
		if err := g.stillCovers(grant, need); err != nil {
			return nil, err
		}
		// Admitted once: the same approval again in this batch is closed, not a second
		// transaction with its id.
		delete(g.approved, approval)
	}
	g.count(check, binding)
	return nil, nil
}

// stillCovers refuses an approved intent whose approval no longer meets what the policies
// ask now: a policy changed since (a policy change applies from its commit on) to ask for
// more approvers, or another role, or another policy now decides who approves. A policy
// that asks for less, or no approval at all, admits it.
// It is a refusal for good (the approval ends REFUSED): the intent must be asked for again.
func (g *policyGate) stillCovers(grant services.ApprovedGrant, need *approvalNeed) error {
	if need == nil {
		return nil
	}
	scope, rule := need.policy.Scope.String(), need.policy.Policy.Approval
	if scope == grant.PolicyScope && need.policy.Version == grant.PolicyVersion {
		return nil
	}
	if scope == grant.PolicyScope && rule.Approvers <= grant.Required && rule.Role == grant.Role {
		return nil
	}
	return g.deny(need.policy, domain.PolicyRuleApproval, fmt.Sprintf("approved by %d of role %q under the policy of %s (version %d); it now asks for %d of role %q: ask for it again",
		grant.Required, grant.Role, grant.PolicyScope, grant.PolicyVersion, rule.Approvers, rule.Role))
}

// countAdopted counts a recovered transaction a retried create adopts: it is on chain
// already, so no rule can refuse it, but what it spends counts against the windows like the
// admission the database lost.
func (g *policyGate) countAdopted(op *Op) {
	if g == nil || g.refuseAll != nil {
		return
	}
	// Admitted once: the same approval again in this batch is closed.
	delete(g.approved, op.Request.Admission.ApprovalID)
	g.count(g.check(op), g.binding(op))
}

// approvalOpen: op admits no approval, or one still APPROVED and unexpired (locked by the
// batch) and not admitted by an earlier op of it.
func (g *policyGate) approvalOpen(op *Op) bool {
	id := op.Request.Admission.ApprovalID
	if id == uuid.Nil {
		return true
	}
	if g == nil || g.refuseAll != nil {
		return false
	}
	_, open := g.approved[id]
	return open
}

func (g *policyGate) check(op *Op) domain.PolicyCheck {
	return domain.PolicyCheck{Intent: op.Request.Intent, GasLimit: op.GasLimit, FeeCapPerGas: op.Request.Admission.FeeCapPerGas,
		RemainingAfter: op.Request.Admission.RemainingAfter, DataFeeBound: op.Request.Admission.DataFeeBound}
}

// binding are the policies that bind op: its signer's, and its credential's.
func (g *policyGate) binding(op *Op) []domain.VersionedPolicy {
	var binding []domain.VersionedPolicy
	for _, p := range g.policies {
		if p.Scope.Kind == domain.PolicyScopeSigner || p.Scope.ID == op.Request.Admission.Credential {
			binding = append(binding, p)
		}
	}
	return binding
}

// count adds an admitted intent to the windows' totals and to what the batch spends.
func (g *policyGate) count(check domain.PolicyCheck, binding []domain.VersionedPolicy) {
	value, fee := new(big.Int).Set(valueOrZero(check.Intent.Value)), check.WorstFee()
	if fee == nil {
		fee = new(big.Int) // no fee window binds it (one would have refused an unbounded fee)
	}
	for _, p := range binding {
		if !p.Policy.Windowed() {
			continue
		}
		for _, w := range p.Policy.Windows {
			key := services.WindowKey{Scope: p.Scope, Minutes: int64(w.Period.Minutes())}
			t := g.total(p.Scope, w)
			g.totals[key] = domain.WindowTotals{Value: new(big.Int).Add(t.Value, value), Fee: new(big.Int).Add(t.Fee, fee)}
		}
		s := g.spent[p.Scope]
		if s == nil {
			s = &services.PolicySpend{Scope: p.Scope, Value: new(big.Int), Fee: new(big.Int)}
			g.spent[p.Scope] = s
			g.order = append(g.order, p.Scope)
		}
		s.Value.Add(s.Value, value)
		s.Fee.Add(s.Fee, fee)
	}
}

func (g *policyGate) deny(p domain.VersionedPolicy, rule, detail string) error {
	g.denied = append(g.denied, denial{rule: rule, scope: p.Scope.Kind})
	return &domain.PolicyDeniedError{Scope: p.Scope.String(), Version: p.Version, Rule: rule, Detail: detail}
}

func (g *policyGate) total(scope domain.PolicyScope, w domain.Window) domain.WindowTotals {
	t, ok := g.totals[services.WindowKey{Scope: scope, Minutes: int64(w.Period.Minutes())}]
	if !ok || t.Value == nil {
		return domain.WindowTotals{Value: new(big.Int), Fee: new(big.Int)}
	}
	return t
}

// spends is what the batch admitted under windowed policies, one per scope.
func (g *policyGate) spends() []services.PolicySpend {
	if g == nil {
		return nil
	}
	out := make([]services.PolicySpend, 0, len(g.order))
	for _, scope := range g.order {
		out = append(out, *g.spent[scope])
	}
	return out
}

// credentials are the distinct credentials b's creates came with.
func (b *signerBatch) credentials() []string {
	var out []string
	for _, op := range b.ops {
		if c := op.Request.Admission.Credential; c != "" && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

func valueOrZero(v *big.Int) *big.Int {
	if v == nil {
		return new(big.Int)
	}
	return v
}

// deniedRules are the gate's refusals (nil for no gate).
func (g *policyGate) deniedRules() []denial {
	if g == nil {
		return nil
	}
	return g.denied
}

// lockPoliciesOfFullPath locks up front, in one sorted statement, the policies of the
// signers and credentials of the batch's parts that take the full path, when there are
// several: each part locks its own policies as it goes, and two nodes whose parts met two
// credentials in opposite orders would otherwise wait on each other until the lock timeout
// or the deadlock detector cancelled a batch, failing its creates.
func (a *Allocator) lockPoliciesOfFullPath(ctx context.Context, sess txmanager.Session, batches []*signerBatch) error {
	var signers, credentials []string
	parts := 0
	for _, b := range batches {
		if b.clear {
			continue
		}
		parts++
		signers = append(signers, b.key)
		for _, c := range b.credentials() {
			if !slices.Contains(credentials, c) {
				credentials = append(credentials, c)
			}
		}
	}
	if parts < 2 {
		return nil
	}
	return a.store.LockPolicies(ctx, sess, signers, credentials)
}
