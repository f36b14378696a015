package services

import (
	"context"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/go-kratos/kratos/v2/log"
	"go.opentelemetry.io/otel/attribute"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// PolicyStore keeps the spending policies and their versions (migration 0020).
type PolicyStore interface {
	// Get answers a *domain.NotFoundError for a scope without a policy.
	Get(ctx context.Context, scope domain.PolicyScope) (domain.VersionedPolicy, error)
	List(ctx context.Context) ([]domain.VersionedPolicy, error)
	Versions(ctx context.Context, scope domain.PolicyScope, limit int) ([]PolicyVersion, error)
	// Lock locks the scope's policy inside sess and answers its document ("" for none) and
	// the last version number its history used.
	Lock(ctx context.Context, sess txmanager.Session, scope domain.PolicyScope) (current string, lastVersion int64, err error)
	// WaitForOpenBatches waits, until sess ends, for the writer batches open now and holds
	// new ones back: a scope's first policy has no row they could lock.
	WaitForOpenBatches(ctx context.Context, sess txmanager.Session) error
	Put(ctx context.Context, sess txmanager.Session, scope domain.PolicyScope, version int64, policy domain.Policy, by string) error
	Delete(ctx context.Context, sess txmanager.Session, scope domain.PolicyScope, version int64, by string) (deleted bool, err error)
	// PruneSpend removes spend buckets no window can reach.
	PruneSpend(ctx context.Context) (int64, error)
	// WindowUsage answers what every window of every policy counts now.
	WindowUsage(ctx context.Context) ([]WindowUsage, error)
}

// WindowUsage is one window of one policy: its limits and what it counts now.
type WindowUsage struct {
	Scope  domain.PolicyScope
	Window domain.Window
	Totals domain.WindowTotals
}

// PolicyVersion is one version of a scope's policy; Rules is "" for a deletion.
type PolicyVersion struct {
	Version   int64
	Rules     string
	ChangedAt time.Time
	ChangedBy string
}

// WindowKey names one window of one scope's policy by its length in minutes.
type WindowKey struct {
	Scope   domain.PolicyScope
	Minutes int64
}

// PolicySpend is what a writer batch admitted under one scope's windowed policy.
type PolicySpend struct {
	Scope domain.PolicyScope
	Value *big.Int
	Fee   *big.Int
}

// PolicyBook changes the spending policies at run time. A change is versioned and audited
// in the same transaction, and every writer batch reads the policies inside its own fenced
// transaction (docs/policies.md), so a change binds every node from its commit on.
type PolicyBook struct {
	tx    txmanager.Manager
	store PolicyStore
	audit *AuditTrail
	roles KnownRoles
	log   *log.Helper
}

// KnownRoles are the roles credentials may hold and approval rules may name (auth.roles).
type KnownRoles []string

// NewPolicyBook wires the book and its gauges: each window's total and limit, for value and
// for worst-case fee, read from the database at each scrape (any node shows the cluster's).
func NewPolicyBook(tx txmanager.Manager, store PolicyStore, audit *AuditTrail, roles KnownRoles, metrics *telemetry.Metrics, logger log.Logger) (*PolicyBook, error) {
	b := &PolicyBook{tx: tx, store: store, audit: audit, roles: roles, log: log.NewHelper(log.With(logger, "component", "policies"))}
	if metrics == nil {
		return b, nil
	}
	used := func(u WindowUsage, part string) *big.Int {
		if limitOf(u.Window, part) == nil {
			return nil
		}
		if part == "value" {
			return u.Totals.Value
		}
		return u.Totals.Fee
	}
	limit := func(u WindowUsage, part string) *big.Int {
		if l := limitOf(u.Window, part); l != nil {
			return &l.Int
		}
		return nil
	}
	if err := metrics.RegisterFloatGauge(telemetry.PolicyWindowUsedWei, "What each spending-policy window counts now, by scope, period and part (value, fee), in wei.",
		observeWindows(store, used)); err != nil {
		return nil, err
	}
	err := metrics.RegisterFloatGauge(telemetry.PolicyWindowLimitWei, "Each spending-policy window's limit, by scope, period and part (value, fee), in wei.",
		observeWindows(store, limit))
	return b, err
}

// limitOf is a window's limit on part (value or fee), nil when it has none.
func limitOf(w domain.Window, part string) *domain.Wei {
	if part == "value" {
		return w.MaxValue
	}
	return w.MaxFee
}

// observeWindows records, for every window and part, the figure pick answers (nil: none).
func observeWindows(store PolicyStore, pick func(WindowUsage, string) *big.Int) func(context.Context, func(float64, ...attribute.KeyValue)) {
	return func(ctx context.Context, record func(float64, ...attribute.KeyValue)) {
		ctx, cancel := context.WithTimeout(ctx, gaugeReadTimeout)
		defer cancel()
		usage, err := store.WindowUsage(ctx)
		if err != nil {
			return
		}
		for _, u := range usage {
			for _, part := range []string{"value", "fee"} {
				figure := pick(u, part)
				if figure == nil {
					continue
				}
				f, _ := new(big.Float).SetInt(figure).Float64()
				record(f, attribute.String("scope_kind", string(u.Scope.Kind)), attribute.String("scope", u.Scope.ID),
					attribute.String("period", u.Window.Period.String()), attribute.String("part", part))
			}
		}
	}
}

// gaugeReadTimeout bounds a scrape's database read.
const gaugeReadTimeout = 2 * time.Second

// Set validates raw and makes it the scope's policy, as its next version.
func (b *PolicyBook) Set(ctx context.Context, kind, id string, raw []byte, by string) (domain.VersionedPolicy, error) {
	scope, err := domain.ParsePolicyScope(kind, id)
	if err != nil {
		return domain.VersionedPolicy{}, err
	}
	policy, err := domain.ParsePolicy(raw)
	if err != nil {
		return domain.VersionedPolicy{}, err
	}
	if a := policy.Approval; a != nil && !slices.Contains(b.roles, a.Role) {
		return domain.VersionedPolicy{}, &domain.ValidationError{Field: "approval.role",
			Reason: fmt.Sprintf("%q is not a role this deployment knows (auth.roles: %s)", a.Role, strings.Join(b.roles, ", "))}
	}
	var version int64
	err = b.tx.WithinTx(ctx, txmanager.DefaultOptions().WithTraceName("policy.set"), func(ctx context.Context, sess txmanager.Session) error {
		current, last, err := b.store.Lock(ctx, sess, scope)
		if err != nil {
			return err
		}
		if current == "" {
			// A first policy: batches that found none commit before it, later ones read it.
			if err := b.store.WaitForOpenBatches(ctx, sess); err != nil {
				return err
			}
		}
		version = last + 1
		if err := b.store.Put(ctx, sess, scope, version, policy, by); err != nil {
			return err
		}
		return b.audit.Record(ctx, sess, by, domain.AuditPolicySet, "policy "+scope.String(), current, policyAudit(version, policy))
	})
	if err != nil {
		return domain.VersionedPolicy{}, err
	}
	b.log.Infow("msg", "spending policy set", "scope", scope.String(), "version", version, "by", by)
	return b.store.Get(ctx, scope)
}

// Delete removes the scope's policy; its history keeps the deletion as a version.
func (b *PolicyBook) Delete(ctx context.Context, kind, id, by string) (int64, error) {
	scope, err := domain.ParsePolicyScope(kind, id)
	if err != nil {
		return 0, err
	}
	var version int64
	err = b.tx.WithinTx(ctx, txmanager.DefaultOptions().WithTraceName("policy.delete"), func(ctx context.Context, sess txmanager.Session) error {
		current, last, err := b.store.Lock(ctx, sess, scope)
		if err != nil {
			return err
		}
		if current == "" {
			return &domain.NotFoundError{What: "no policy for " + scope.String()}
		}
		version = last + 1
		if _, err := b.store.Delete(ctx, sess, scope, version, by); err != nil {
			return err
		}
		return b.audit.Record(ctx, sess, by, domain.AuditPolicyDeleted, "policy "+scope.String(), current, nil)
	})
	if err != nil {
		return 0, err
	}
	b.log.Infow("msg", "spending policy deleted", "scope", scope.String(), "version", version, "by", by)
	return version, nil
}

// Get answers the scope's policy.
func (b *PolicyBook) Get(ctx context.Context, kind, id string) (domain.VersionedPolicy, error) {
	scope, err := domain.ParsePolicyScope(kind, id)
	if err != nil {
		return domain.VersionedPolicy{}, err
	}
	return b.store.Get(ctx, scope)
}

// List answers every policy.
func (b *PolicyBook) List(ctx context.Context) ([]domain.VersionedPolicy, error) {
	return b.store.List(ctx)
}

// Versions answers the scope's history, newest first (at most 100).
func (b *PolicyBook) Versions(ctx context.Context, kind, id string) ([]PolicyVersion, error) {
	scope, err := domain.ParsePolicyScope(kind, id)
	if err != nil {
		return nil, err
	}
	return b.store.Versions(ctx, scope, 100)
}

// policyAudit is a policy as its audit record shows it.
func policyAudit(version int64, p domain.Policy) string {
	return fmt.Sprintf(`{"version":%d,"rules":%s}`, version, p.JSON())
}
