package services

import (
	"context"
	"fmt"
	"math/big"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/go-kratos/kratos/v2/log"

	"github.com/bionicotaku/txmanager-service/internal/domain"
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
	Put(ctx context.Context, sess txmanager.Session, scope domain.PolicyScope, version int64, policy domain.Policy, by string) error
	Delete(ctx context.Context, sess txmanager.Session, scope domain.PolicyScope, version int64, by string) (deleted bool, err error)
	// PruneSpend removes spend buckets no window can reach.
	PruneSpend(ctx context.Context) (int64, error)
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
	log   *log.Helper
}

// NewPolicyBook wires the book.
func NewPolicyBook(tx txmanager.Manager, store PolicyStore, audit *AuditTrail, logger log.Logger) *PolicyBook {
	return &PolicyBook{tx: tx, store: store, audit: audit, log: log.NewHelper(log.With(logger, "component", "policies"))}
}

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
	var version int64
	err = b.tx.WithinTx(ctx, txmanager.DefaultOptions().WithTraceName("policy.set"), func(ctx context.Context, sess txmanager.Session) error {
		current, last, err := b.store.Lock(ctx, sess, scope)
		if err != nil {
			return err
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
