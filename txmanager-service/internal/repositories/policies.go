package repositories

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories/sqlcdb"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// PolicyRepository implements services.PolicyStore on spending_policy, its versions and
// the spend buckets (migration 0020).
type PolicyRepository struct {
	q *sqlcdb.Queries
}

// NewPolicyRepository builds the repository on the pool.
func NewPolicyRepository(pool *pgxpool.Pool) *PolicyRepository {
	return &PolicyRepository{q: sqlcdb.New(pool)}
}

// Get implements services.PolicyStore.
func (r *PolicyRepository) Get(ctx context.Context, scope domain.PolicyScope) (domain.VersionedPolicy, error) {
	row, err := r.q.GetSpendingPolicy(ctx, sqlcdb.GetSpendingPolicyParams{ScopeKind: string(scope.Kind), Scope: scope.ID})
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.VersionedPolicy{}, &domain.NotFoundError{What: "no policy for " + scope.String()}
	}
	if err != nil {
		return domain.VersionedPolicy{}, fmt.Errorf("policy of %s: %w", scope, err)
	}
	return storedPolicy(row.ScopeKind, row.Scope, row.Version, row.Rules, row.UpdatedAt, row.UpdatedBy)
}

// List implements services.PolicyStore.
func (r *PolicyRepository) List(ctx context.Context) ([]domain.VersionedPolicy, error) {
	rows, err := r.q.ListSpendingPolicies(ctx)
	if err != nil {
		return nil, fmt.Errorf("list policies: %w", err)
	}
	out := make([]domain.VersionedPolicy, 0, len(rows))
	for _, row := range rows {
		p, err := storedPolicy(row.ScopeKind, row.Scope, row.Version, row.Rules, row.UpdatedAt, row.UpdatedBy)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// Versions implements services.PolicyStore.
func (r *PolicyRepository) Versions(ctx context.Context, scope domain.PolicyScope, limit int) ([]services.PolicyVersion, error) {
	rows, err := r.q.ListSpendingPolicyVersions(ctx, sqlcdb.ListSpendingPolicyVersionsParams{ScopeKind: string(scope.Kind), Scope: scope.ID, MaxRows: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("policy versions of %s: %w", scope, err)
	}
	out := make([]services.PolicyVersion, len(rows))
	for i, row := range rows {
		out[i] = services.PolicyVersion{Version: row.Version, Rules: row.Rules, ChangedAt: row.ChangedAt, ChangedBy: row.ChangedBy}
	}
	return out, nil
}

// WaitForOpenBatches implements services.PolicyStore.
func (r *PolicyRepository) WaitForOpenBatches(ctx context.Context, sess txmanager.Session) error {
	if err := sqlcdb.New(sess.DB()).SerializeFirstPolicies(ctx); err != nil {
		return fmt.Errorf("wait for the writer batches open now: %w", err)
	}
	return nil
}

// Lock implements services.PolicyStore: the scope's current policy, locked until sess
// ends, and the last version its history used.
func (r *PolicyRepository) Lock(ctx context.Context, sess txmanager.Session, scope domain.PolicyScope) (current string, lastVersion int64, err error) {
	q := sqlcdb.New(sess.DB())
	if err := q.SerializePolicyChanges(ctx, sqlcdb.SerializePolicyChangesParams{ScopeKind: string(scope.Kind), Scope: scope.ID}); err != nil {
		return "", 0, fmt.Errorf("wait for other changes of the policy of %s: %w", scope, err)
	}
	row, err := q.LockSpendingPolicy(ctx, sqlcdb.LockSpendingPolicyParams{ScopeKind: string(scope.Kind), Scope: scope.ID})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return "", 0, fmt.Errorf("lock policy of %s: %w", scope, err)
	default:
		current = row.Rules
	}
	lastVersion, err = q.LastSpendingPolicyVersion(ctx, sqlcdb.LastSpendingPolicyVersionParams{ScopeKind: string(scope.Kind), Scope: scope.ID})
	if err != nil {
		return "", 0, fmt.Errorf("policy versions of %s: %w", scope, err)
	}
	return current, lastVersion, nil
}

// Put implements services.PolicyStore.
func (r *PolicyRepository) Put(ctx context.Context, sess txmanager.Session, scope domain.PolicyScope, version int64, policy domain.Policy, by string) error {
	q := sqlcdb.New(sess.DB())
	rules := policy.JSON()
	if err := q.UpsertSpendingPolicy(ctx, sqlcdb.UpsertSpendingPolicyParams{ScopeKind: string(scope.Kind), Scope: scope.ID, Version: version, Rules: rules,
		Windowed: policy.Windowed(), UpdatedBy: by}); err != nil {
		return fmt.Errorf("store policy of %s: %w", scope, err)
	}
	if err := q.InsertSpendingPolicyVersion(ctx, sqlcdb.InsertSpendingPolicyVersionParams{ScopeKind: string(scope.Kind), Scope: scope.ID, Version: version, Rules: rules, ChangedBy: by}); err != nil {
		return fmt.Errorf("store policy version of %s: %w", scope, err)
	}
	return nil
}

// Delete implements services.PolicyStore; deleted is false when the scope had no policy.
func (r *PolicyRepository) Delete(ctx context.Context, sess txmanager.Session, scope domain.PolicyScope, version int64, by string) (bool, error) {
	q := sqlcdb.New(sess.DB())
	n, err := q.DeleteSpendingPolicy(ctx, sqlcdb.DeleteSpendingPolicyParams{ScopeKind: string(scope.Kind), Scope: scope.ID})
	if err != nil || n == 0 {
		return false, err
	}
	if err := q.InsertSpendingPolicyVersion(ctx, sqlcdb.InsertSpendingPolicyVersionParams{ScopeKind: string(scope.Kind), Scope: scope.ID, Version: version, ChangedBy: by}); err != nil {
		return false, fmt.Errorf("store policy deletion of %s: %w", scope, err)
	}
	return true, nil
}

// PruneSpend implements services.PolicyStore.
func (r *PolicyRepository) PruneSpend(ctx context.Context) (int64, error) {
	n, err := r.q.PrunePolicySpend(ctx)
	if err != nil {
		return 0, fmt.Errorf("prune policy spend: %w", err)
	}
	return n, nil
}

// HoldFirstPolicies implements services.AllocationStore.
func (r AllocationRepository) HoldFirstPolicies(ctx context.Context, sess txmanager.Session) error {
	if _, err := sqlcdb.New(sess.DB()).HoldFirstPolicies(ctx); err != nil {
		return fmt.Errorf("hold first spending policies back: %w", err)
	}
	return nil
}

// PoliciesForAdmission implements services.AllocationStore.
func (r AllocationRepository) PoliciesForAdmission(ctx context.Context, sess txmanager.Session, signer string, credentials []string) ([]domain.VersionedPolicy, error) {
	rows, err := sqlcdb.New(sess.DB()).PoliciesForAdmission(ctx, sqlcdb.PoliciesForAdmissionParams{Signer: signer, Credentials: credentials})
	if err != nil {
		return nil, fmt.Errorf("policies for admission: %w", err)
	}
	out := make([]domain.VersionedPolicy, 0, len(rows))
	for _, row := range rows {
		p, err := parseStoredPolicy(row.ScopeKind, row.Scope, row.Rules)
		if err != nil {
			return nil, err
		}
		out = append(out, domain.VersionedPolicy{Scope: domain.PolicyScope{Kind: domain.PolicyScopeKind(row.ScopeKind), ID: row.Scope}, Version: row.Version, Policy: p})
	}
	return out, nil
}

// WindowTotals implements services.AllocationStore.
func (r AllocationRepository) WindowTotals(ctx context.Context, sess txmanager.Session, keys []services.WindowKey) (map[services.WindowKey]domain.WindowTotals, error) {
	return windowTotals(ctx, sqlcdb.New(sess.DB()), r.chainID, keys)
}

// everyChain asks windowTotals for what every chain spent together.
const everyChain = -1

func windowTotals(ctx context.Context, q *sqlcdb.Queries, chainID int64, keys []services.WindowKey) (map[services.WindowKey]domain.WindowTotals, error) {
	p := sqlcdb.PolicyWindowTotalsParams{ChainID: chainID, ScopeKinds: make([]string, len(keys)), Scopes: make([]string, len(keys)), WindowMinutes: make([]int64, len(keys))}
	for i, k := range keys {
		p.ScopeKinds[i], p.Scopes[i], p.WindowMinutes[i] = string(k.Scope.Kind), k.Scope.ID, k.Minutes
	}
	rows, err := q.PolicyWindowTotals(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("policy window totals: %w", err)
	}
	out := make(map[services.WindowKey]domain.WindowTotals, len(rows))
	for _, row := range rows {
		value, ok1 := new(big.Int).SetString(row.ValueWei, 10)
		fee, ok2 := new(big.Int).SetString(row.FeeWei, 10)
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("policy window totals: unreadable sums %q, %q", row.ValueWei, row.FeeWei)
		}
		key := services.WindowKey{Scope: domain.PolicyScope{Kind: domain.PolicyScopeKind(row.ScopeKind), ID: row.Scope}, Minutes: row.Minutes}
		out[key] = domain.WindowTotals{Value: value, Fee: fee}
	}
	return out, nil
}

// AddSpend implements services.AllocationStore.
func (r AllocationRepository) AddSpend(ctx context.Context, sess txmanager.Session, spends []services.PolicySpend) error {
	p := sqlcdb.AddPolicySpendParams{ChainID: r.chainID, ScopeKinds: make([]string, len(spends)), Scopes: make([]string, len(spends)), ValueWei: make([]string, len(spends)), FeeWei: make([]string, len(spends))}
	for i, s := range spends {
		p.ScopeKinds[i], p.Scopes[i], p.ValueWei[i], p.FeeWei[i] = string(s.Scope.Kind), s.Scope.ID, s.Value.String(), s.Fee.String()
	}
	if err := sqlcdb.New(sess.DB()).AddPolicySpend(ctx, p); err != nil {
		return fmt.Errorf("count policy spend: %w", err)
	}
	return nil
}

func storedPolicy(kind, scope string, version int64, rules string, at time.Time, by string) (domain.VersionedPolicy, error) {
	p, err := parseStoredPolicy(kind, scope, rules)
	if err != nil {
		return domain.VersionedPolicy{}, err
	}
	return domain.VersionedPolicy{Scope: domain.PolicyScope{Kind: domain.PolicyScopeKind(kind), ID: scope}, Version: version, Policy: p, UpdatedAt: at, UpdatedBy: by}, nil
}

// parseStoredPolicy reads a stored document; one that no longer parses (edited by hand,
// or a newer version's) fails the read rather than binding nothing.
func parseStoredPolicy(kind, scope, rules string) (domain.Policy, error) {
	p, err := domain.ParsePolicy([]byte(rules))
	if err != nil {
		return domain.Policy{}, fmt.Errorf("stored policy of %s %s does not parse: %w", kind, scope, err)
	}
	return p, nil
}

// WindowUsage implements services.PolicyStore.
func (r *PolicyRepository) WindowUsage(ctx context.Context) ([]services.WindowUsage, error) {
	policies, err := r.List(ctx)
	if err != nil {
		return nil, err
	}
	var keys []services.WindowKey
	var out []services.WindowUsage
	for _, p := range policies {
		for _, w := range p.Policy.Windows {
			keys = append(keys, services.WindowKey{Scope: p.Scope, Minutes: int64(w.Period.Minutes())})
			out = append(out, services.WindowUsage{Scope: p.Scope, Window: w})
		}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	totals, err := windowTotals(ctx, r.q, everyChain, keys)
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i].Totals = totals[keys[i]]
	}
	return out, nil
}
