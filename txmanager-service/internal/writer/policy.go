package writer

import (
	"context"
	"math/big"
	"slices"

	"github.com/bionicotaku/lingo-utils/txmanager"

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
}

type denial struct {
	rule  string
	scope domain.PolicyScopeKind
}

// policyGate loads the gate for b, nil when no policy binds it (the common case costs the
// one look-up).
func (a *Allocator) policyGate(ctx context.Context, sess txmanager.Session, b *signerBatch) (*policyGate, error) {
	policies, err := a.store.PoliciesForAdmission(ctx, sess, b.key, b.credentials())
	if err != nil || len(policies) == 0 {
		return nil, err
	}
	g := &policyGate{policies: policies, spent: map[domain.PolicyScope]*services.PolicySpend{}}
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

// admit checks op against every policy binding it; an admitted op is added to the totals.
func (g *policyGate) admit(op *Op) error {
	if g == nil {
		return nil
	}
	if g.refuseAll != nil {
		return g.refuseAll
	}
	check := domain.PolicyCheck{Intent: op.Request.Intent, GasLimit: op.GasLimit, FeeCapPerGas: op.Request.Admission.FeeCapPerGas,
		RemainingAfter: op.Request.Admission.RemainingAfter}
	var binding []domain.VersionedPolicy
	for _, p := range g.policies {
		if p.Scope.Kind == domain.PolicyScopeSigner || p.Scope.ID == op.Request.Admission.Credential {
			binding = append(binding, p)
		}
	}
	for _, p := range binding {
		if rule, detail := p.Policy.CheckIntent(check); rule != "" {
			return g.deny(p, rule, detail)
		}
		for _, w := range p.Policy.Windows {
			if rule, detail := w.CheckWindow(check, g.total(p.Scope, w)); rule != "" {
				return g.deny(p, rule, detail)
			}
		}
	}
	value, fee := new(big.Int).Set(valueOrZero(op.Request.Intent.Value)), check.WorstFee()
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
	return nil
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
