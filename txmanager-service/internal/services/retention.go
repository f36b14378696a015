package services

import (
	"context"
	"time"

	"github.com/go-kratos/kratos/v2/log"

	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// RetentionConfig sets what is kept: final transactions, their attempts and feed rows
// younger than Horizon (0 keeps everything), deleted BatchSize at a time.
type RetentionConfig struct {
	Horizon   time.Duration
	BatchSize int
	// MaxBatches bounds one pass, so a large backlog is worked off over several passes
	// instead of one long burst of deletes.
	MaxBatches int
	// AuditHorizon is the audit trail's own retention (0 keeps it for ever).
	AuditHorizon time.Duration
}

// AdminRetention prunes what the safety rails keep: the audit trail past its own horizon,
// and the policies' spend buckets no window can reach any more.
type AdminRetention struct {
	horizon  time.Duration
	audit    *AuditTrail
	policies PolicyStore
	log      *log.Helper
}

// NewAdminRetention wires it.
func NewAdminRetention(cfg RetentionConfig, audit *AuditTrail, policies PolicyStore, logger log.Logger) *AdminRetention {
	return &AdminRetention{horizon: cfg.AuditHorizon, audit: audit, policies: policies, log: log.NewHelper(log.With(logger, "component", "retention"))}
}

// Prune runs one pass.
func (r *AdminRetention) Prune(ctx context.Context) error {
	if _, err := r.policies.PruneSpend(ctx); err != nil {
		return err
	}
	if r.horizon <= 0 {
		return nil
	}
	n, err := r.audit.Prune(ctx, r.horizon)
	if n > 0 {
		r.log.Infow("msg", "audit records past the audit trail's own horizon deleted", "records", n, "horizon", r.horizon.String())
	}
	return err
}

// Pruned is what one retention batch deleted, and the feed position it deleted through.
type Pruned struct {
	Transactions, Attempts, Completions int
	Through                             FeedPosition
}

// RetentionStore deletes final rows completed longer than horizon ago by the database's
// clock, oldest feed positions first.
type RetentionStore interface {
	PruneBatch(ctx context.Context, horizon time.Duration, batch int) (Pruned, error)
	// PruneEvents deletes up to batch service events older than horizon; it returns how many.
	PruneEvents(ctx context.Context, horizon time.Duration, batch int) (int, error)
}

// pruneEvents deletes service events past the horizon, as many batches as a pass allows.
func (r *Retention) pruneEvents(ctx context.Context) (int, error) {
	total := 0
	for range max(r.cfg.MaxBatches, 1) {
		n, err := r.store.PruneEvents(ctx, r.cfg.Horizon, r.cfg.BatchSize)
		total += n
		if err != nil || n < r.cfg.BatchSize {
			return total, err
		}
	}
	return total, nil
}

// Retention keeps the tables from growing for ever. It deletes in small batches, each its
// own short statement, so writers never wait long behind it; what it deletes is final and
// written by no one, so any node may run it. Idempotency keys (requestId) of pruned
// transactions are forgotten with them: the horizon is also the replay window.
type Retention struct {
	cfg     RetentionConfig
	store   RetentionStore
	metrics *telemetry.Metrics
	log     *log.Helper
}

// NewRetention wires retention.
func NewRetention(cfg RetentionConfig, store RetentionStore, metrics *telemetry.Metrics, logger log.Logger) *Retention {
	return &Retention{cfg: cfg, store: store, metrics: metrics, log: log.NewHelper(log.With(logger, "component", "retention"))}
}

// Prune runs one pass: batches until nothing older than the horizon is left or the pass's
// bound is reached. It returns how many transactions it deleted.
func (r *Retention) Prune(ctx context.Context) (int, error) {
	if r.cfg.Horizon <= 0 {
		return 0, nil
	}
	total := Pruned{}
	for range max(r.cfg.MaxBatches, 1) {
		p, err := r.store.PruneBatch(ctx, r.cfg.Horizon, r.cfg.BatchSize)
		if err != nil {
			return total.Transactions, err
		}
		total.Transactions += p.Transactions
		total.Attempts += p.Attempts
		total.Completions += p.Completions
		total.Through = p.Through
		if p.Completions < r.cfg.BatchSize {
			break
		}
	}
	events, err := r.pruneEvents(ctx)
	if err != nil {
		return total.Transactions, err
	}
	if events > 0 {
		r.metrics.Pruned(ctx, "event", events)
		r.log.Infow("msg", "service events past the retention horizon deleted", "events", events, "horizon", r.cfg.Horizon.String())
	}
	if total.Completions > 0 {
		r.metrics.Pruned(ctx, "transaction", total.Transactions)
		r.metrics.Pruned(ctx, "attempt", total.Attempts)
		r.metrics.Pruned(ctx, "completion", total.Completions)
		r.log.Infow("msg", "final transactions past the retention horizon deleted", "transactions", total.Transactions,
			"attempts", total.Attempts, "completions", total.Completions, "feed_pruned_through", int64(total.Through), "horizon", r.cfg.Horizon.String())
	}
	return total.Transactions, nil
}
