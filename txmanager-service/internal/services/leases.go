package services

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-kratos/kratos/v2/log"
	"golang.org/x/sync/singleflight"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// LeaseConfig tunes lease handling (docs/design.md#lease-and-fencing; defaults 10s / 3s / 1s).
type LeaseConfig struct {
	Node          string
	Duration      time.Duration
	RenewInterval time.Duration
	Skew          time.Duration
	// IdleTimeout: a lease not used for this long is released instead of renewed.
	IdleTimeout time.Duration
	// NotLeaderRetryAfter is the hint given to callers routed to a non-owner.
	NotLeaderRetryAfter time.Duration
}

// LeaseManager holds this node's signer leases: it acquires them on demand, renews the ones
// in use, releases idle ones, and stops trusting a lease locally once it could have expired
// (local fencing), whatever the database has or has not been asked.
type LeaseManager struct {
	cfg     LeaseConfig
	store   LeaseStore
	clock   Clock
	metrics *telemetry.Metrics
	log     *log.Helper
	flight  singleflight.Group

	mu       sync.Mutex
	held     map[string]*heldLease
	onLost   []func(signer string)
	draining bool
	// foreign remembers, briefly, which other node holds a signer: a non-owner answers (or
	// forwards) from memory instead of asking the database on every request.
	foreign map[string]foreignLease
}

// foreignLease is another node's lease as last seen, trusted until until.
type foreignLease struct {
	owner string
	until time.Time
}

// foreignOwnerTTL bounds how long a non-owner trusts what it saw of another node's lease:
// a lease released or handed over is noticed within it.
const foreignOwnerTTL = time.Second

type heldLease struct {
	lease    domain.Lease
	lastUsed time.Time
}

// NewLeaseManager builds a manager; call OnLost before use to hook cache eviction.
func NewLeaseManager(cfg LeaseConfig, store LeaseStore, clock Clock, metrics *telemetry.Metrics, logger log.Logger) *LeaseManager {
	return &LeaseManager{
		cfg: cfg, store: store, clock: clock, metrics: metrics,
		log:  log.NewHelper(log.With(logger, "component", "leases", "node_id", cfg.Node)),
		held: map[string]*heldLease{}, foreign: map[string]foreignLease{},
	}
}

// Node is this node's id.
func (m *LeaseManager) Node() string { return m.cfg.Node }

// OnLost registers fn to run whenever a lease of ours ends or changes epoch (expiry,
// takeover, fencing, release): caches keyed by the old epoch must go.
func (m *LeaseManager) OnLost(fn func(signer string)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.onLost = append(m.onLost, fn)
}

// Acquire returns a lease on signer valid for at least the skew allowance, from memory when
// possible and from the database otherwise. Another owner yields a *domain.NotLeaderError.
func (m *LeaseManager) Acquire(ctx context.Context, signer string) (domain.Lease, error) {
	now := m.clock.Now()
	m.mu.Lock()
	if m.draining {
		m.mu.Unlock()
		return domain.Lease{}, &domain.UnavailableError{Reason: "node is shutting down", RetryAfter: time.Second}
	}
	if h, ok := m.held[signer]; ok && h.lease.HeldAt(now.Add(m.cfg.Skew)) {
		h.lastUsed = now
		lease := h.lease
		m.mu.Unlock()
		return lease, nil
	}
	if f, ok := m.foreign[signer]; ok && now.Before(f.until) {
		m.mu.Unlock()
		return domain.Lease{}, &domain.NotLeaderError{Signer: signer, Owner: f.owner, RetryAfter: m.cfg.NotLeaderRetryAfter}
	}
	m.mu.Unlock()
	// The callers that join one flight share its answer, so it runs on a context of its own
	// (bounded by a lease's length): the first caller's deadline or cancellation must not
	// fail the others. Each caller waits as long as its own context allows.
	flight := m.flight.DoChan(signer, func() (any, error) {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cmp.Or(m.cfg.Duration, 10*time.Second))
		defer cancel()
		return m.acquireFromStore(ctx, signer)
	})
	select {
	case res := <-flight:
		if res.Err != nil {
			return domain.Lease{}, res.Err
		}
		return res.Val.(domain.Lease), nil
	case <-ctx.Done():
		return domain.Lease{}, &domain.UnavailableError{Reason: "lease store", RetryAfter: time.Second, Err: ctx.Err()}
	}
}

func (m *LeaseManager) acquireFromStore(ctx context.Context, signer string) (domain.Lease, error) {
	sentAt := m.clock.Now()
	grant, err := m.store.AcquireOrRenew(ctx, signer, m.cfg.Node, m.cfg.Duration, m.cfg.Skew)
	if err != nil {
		m.metrics.LeaseAcquire(ctx, "error")
		return domain.Lease{}, &domain.UnavailableError{Reason: "lease store", RetryAfter: time.Second, Err: err}
	}
	if !grant.Acquired {
		m.metrics.LeaseAcquire(ctx, "not_leader")
		m.forget(signer, 0)
		until := sentAt.Add(foreignOwnerTTL)
		if expiry := domain.LocalDeadline(sentAt, grant.DBNow, grant.ExpiresAt, m.cfg.Skew); expiry.Before(until) {
			until = expiry
		}
		m.mu.Lock()
		m.foreign[signer] = foreignLease{owner: grant.Owner, until: until}
		m.mu.Unlock()
		return domain.Lease{}, &domain.NotLeaderError{Signer: signer, Owner: grant.Owner, RetryAfter: m.cfg.NotLeaderRetryAfter}
	}
	lease := domain.Lease{
		Signer:     signer,
		Owner:      grant.Owner,
		Token:      grant.Token,
		ExpiresAt:  grant.ExpiresAt,
		ValidUntil: domain.LocalDeadline(sentAt, grant.DBNow, grant.ExpiresAt, m.cfg.Skew),
	}
	m.mu.Lock()
	previous, had := m.held[signer]
	m.held[signer] = &heldLease{lease: lease, lastUsed: sentAt}
	delete(m.foreign, signer)
	hooks := m.onLost
	m.mu.Unlock()
	if had && previous.lease.Token == lease.Token {
		m.metrics.LeaseAcquire(ctx, "renewed")
		return lease, nil
	}
	m.metrics.LeaseAcquire(ctx, "acquired")
	m.log.WithContext(ctx).Infow("msg", "lease acquired", "signer", signer, "fencing_token", lease.Token, "expires_at", lease.ExpiresAt)
	// A new epoch: whatever was cached under a previous token may be stale.
	for _, fn := range hooks {
		fn(signer)
	}
	return lease, nil
}

// Current returns the lease held on signer if it can still be trusted now.
func (m *LeaseManager) Current(signer string) (domain.Lease, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, ok := m.held[signer]
	if !ok || !h.lease.HeldAt(m.clock.Now()) {
		return domain.Lease{}, false
	}
	return h.lease, true
}

// Held lists the leases this node can trust right now.
func (m *LeaseManager) Held() []domain.Lease {
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]domain.Lease, 0, len(m.held))
	for _, h := range m.held {
		if h.lease.HeldAt(now) {
			out = append(out, h.lease)
		}
	}
	return out
}

// HeldSigners lists the signers of Held.
func (m *LeaseManager) HeldSigners() []string {
	return domain.LeaseSigners(m.Held())
}

// Fenced is called when a write with lease was rejected: the lease is dropped at once.
func (m *LeaseManager) Fenced(ctx context.Context, lease domain.Lease, write string) {
	m.metrics.Fenced(ctx)
	m.log.WithContext(ctx).Warnw("msg", "write fenced", "signer", lease.Signer, "fencing_token", lease.Token, "write", write)
	m.forget(lease.Signer, lease.Token)
}

// Fence passes err on; when it is a fenced write it reports it first (Fenced), so the
// lease is dropped before the caller hears of it.
func (m *LeaseManager) Fence(ctx context.Context, lease domain.Lease, err error) error {
	var f *domain.FencedError
	if errors.As(err, &f) {
		m.Fenced(ctx, lease, f.Write)
	}
	return err
}

// forget drops our lease on signer (only if it still has token, when token != 0) and runs
// the lost hooks.
func (m *LeaseManager) forget(signer string, token uint64) {
	m.mu.Lock()
	h, ok := m.held[signer]
	if !ok || (token != 0 && h.lease.Token != token) {
		m.mu.Unlock()
		return
	}
	delete(m.held, signer)
	hooks := m.onLost
	m.mu.Unlock()
	for _, fn := range hooks {
		fn(signer)
	}
}

// Tick renews leases in use, releases idle ones and drops those that could have expired.
// The LeaseKeeper worker calls it every RenewInterval.
func (m *LeaseManager) Tick(ctx context.Context) {
	now := m.clock.Now()
	m.mu.Lock()
	var renew, release, expired []domain.Lease
	for _, h := range m.held {
		switch {
		case !h.lease.HeldAt(now):
			expired = append(expired, h.lease)
		case now.Sub(h.lastUsed) > m.cfg.IdleTimeout:
			release = append(release, h.lease)
		default:
			renew = append(renew, h.lease)
		}
	}
	m.mu.Unlock()

	for _, lease := range expired {
		// Local fencing: renewals failed for longer than the lease could live.
		m.log.Warnw("msg", "lease expired locally; stopping work for signer", "signer", lease.Signer, "fencing_token", lease.Token)
		m.forget(lease.Signer, lease.Token)
	}
	for _, lease := range release {
		if err := m.release(ctx, lease); err != nil {
			m.log.Warnw("msg", "lease release failed", "signer", lease.Signer, "fencing_token", lease.Token, "error", err.Error())
		}
	}
	m.renew(ctx, renew)
	m.mu.Lock()
	for signer, f := range m.foreign {
		if !now.Before(f.until) {
			delete(m.foreign, signer)
		}
	}
	m.mu.Unlock()
}

// renew extends the leases in one statement. A lease the database no longer has for this
// node (expired, taken over) is dropped at once; a failed statement changes nothing, and
// local fencing ends the leases if renewals keep failing.
func (m *LeaseManager) renew(ctx context.Context, leases []domain.Lease) {
	if len(leases) == 0 {
		return
	}
	sentAt := m.clock.Now()
	grants, err := m.store.Renew(ctx, m.cfg.Node, domain.LeaseSigners(leases), m.cfg.Duration)
	if err != nil {
		m.metrics.LeaseAcquire(ctx, "error")
		m.log.Warnw("msg", "lease renewal failed", "leases", len(leases), "error", err.Error())
		return
	}
	renewed := make(map[string]LeaseGrant, len(grants))
	for _, g := range grants {
		renewed[g.Signer] = g
	}
	for _, lease := range leases {
		g, ok := renewed[lease.Signer]
		if !ok || g.Token != lease.Token {
			m.log.Warnw("msg", "lease not renewed: expired or taken over; stopping work for signer", "signer", lease.Signer, "fencing_token", lease.Token)
			m.forget(lease.Signer, lease.Token)
			continue
		}
		m.metrics.LeaseAcquire(ctx, "renewed")
		lease.ExpiresAt = g.ExpiresAt
		lease.ValidUntil = domain.LocalDeadline(sentAt, g.DBNow, g.ExpiresAt, m.cfg.Skew)
		m.mu.Lock()
		if h, held := m.held[lease.Signer]; held && h.lease.Token == lease.Token {
			h.lease = lease
		}
		m.mu.Unlock()
	}
}

// release stops local work on the signer and ends the lease in the database.
func (m *LeaseManager) release(ctx context.Context, lease domain.Lease) error {
	m.forget(lease.Signer, lease.Token)
	if err := m.store.Release(ctx, lease); err != nil {
		return fmt.Errorf("release %s: %w", lease.Signer, err)
	}
	m.log.Infow("msg", "lease released", "signer", lease.Signer, "fencing_token", lease.Token)
	return nil
}

// LetGo releases our lease on signer now, if this node holds it: the signer was retired,
// and a peer waiting for nothing should not wait for its expiry either.
func (m *LeaseManager) LetGo(ctx context.Context, signer string) error {
	m.mu.Lock()
	h, ok := m.held[signer]
	m.mu.Unlock()
	if !ok {
		return nil
	}
	return m.release(ctx, h.lease)
}

// ReleaseAll stops intake of new leases and releases every lease held, so peers take over
// without waiting for expiry (graceful shutdown, after the writer has flushed).
func (m *LeaseManager) ReleaseAll(ctx context.Context) error {
	m.mu.Lock()
	m.draining = true
	leases := make([]domain.Lease, 0, len(m.held))
	for _, h := range m.held {
		leases = append(leases, h.lease)
	}
	m.mu.Unlock()
	var errs []error
	for _, lease := range leases {
		errs = append(errs, m.release(ctx, lease))
	}
	return errors.Join(errs...)
}

// Touch marks the signer's lease as in use, so the keeper renews it rather than releasing
// it as idle: background work on a signer's open transactions is use.
func (m *LeaseManager) Touch(signer string) {
	now := m.clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if h, ok := m.held[signer]; ok {
		h.lastUsed = now
	}
}
