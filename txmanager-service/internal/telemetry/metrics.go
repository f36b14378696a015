package telemetry

import (
	"context"
	"fmt"
	"math/big"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Metric names, as operators alert on them.
const (
	LeaseAcquireTotal         = "lease_acquire_total"
	LeaseFencedTotal          = "lease_fenced_total"
	WriterQueueDepth          = "writer_queue_depth"
	TxCreateTotal             = "tx_create_total"
	TxSubmitTotal             = "tx_submit_total"
	ReceiptCheckTotal         = "receipt_check_total"
	PendingOldestAgeSeconds   = "pending_oldest_age_seconds"
	ResubmitTotal             = "resubmit_total"
	StuckTotal                = "stuck_total"
	ReorgTotal                = "reorg_total"
	ReadinessProbeTotal       = "readiness_probe_total"
	RateLimitedTotal          = "rate_limited_total"
	ChainEndpointUp           = "chain_endpoint_up"
	ChainEndpointHead         = "chain_endpoint_head"
	RepriceTotal              = "reprice_total"
	NonceHoleFilledTotal      = "nonce_hole_filled_total"
	CompletionsFeedLagSeconds = "completions_feed_lag_seconds"
	RetentionPrunedTotal      = "retention_pruned_total"
	SignerQuarantineTotal     = "signer_quarantine_total"
	SignerQuarantined         = "signer_quarantined"
	SignerRecovering          = "signer_recovering"
	SignerRecoveryUnrecorded  = "signer_recovery_unrecorded_nonces"
	SignerSigningFailing      = "signer_signing_failing"
	SignerUnsignedBacklog     = "signer_unsigned_backlog"
	SignerUnsignedOldestAge   = "signer_unsigned_oldest_age_seconds"
	RecognisedTotal           = "nonce_taken_resolved_total"
	DatabaseServerChanges     = "database_server_changes_total"
	RecoveredTxTotal          = "recovered_tx_total"
	PolicyDeniedTotal         = "policy_denied_total"
	PolicyWindowUsedWei       = "policy_window_used_wei"
	PolicyWindowLimitWei      = "policy_window_limit_wei"
	ApprovalsPending          = "approvals_pending"
	ApprovalsOldestPending    = "approvals_oldest_pending_seconds"
	ApprovalDecisionsTotal    = "approval_decisions_total"
	ApprovalsEndedTotal       = "approvals_ended_total"
	WebhookDeliveriesTotal    = "webhook_deliveries_total"
	WebhookLagSeconds         = "webhook_lag_seconds"
	WebhookSubscriptionsDead  = "webhook_subscriptions_dead"
	SignerRecoverySeconds     = "signer_recovery_seconds"
	SignerSpentWeiTotal       = "signer_spent_wei_total"
	WriterPhaseSeconds        = "writer_phase_seconds"
	// DatabaseSynchronousReplication is registered by the database server watch.
	DatabaseSynchronousReplication = "database_synchronous_replication"
	// The connection pool's figures, registered by the pool.
	DatabasePoolMaxConnections          = "database_pool_max_connections"
	DatabasePoolConnections             = "database_pool_connections"
	DatabasePoolAcquireWaitsTotal       = "database_pool_acquire_waits_total"
	DatabasePoolAcquireWaitSecondsTotal = "database_pool_acquire_wait_seconds_total"
)

// UnknownAnswerResult is the tx_submit_total and resubmit_total label of a node's answer
// no class knows (services.ErrUnknownAnswer); the TxmUnknownNodeAnswer alert watches it.
const UnknownAnswerResult = "unknown_answer"

// Metrics are the service's instruments. Gauges read their value from callbacks registered
// by the component that owns the value (RegisterGauge).
type Metrics struct {
	// Tracer makes the service's own spans (writer batches, pipeline passes, chain calls).
	Tracer        trace.Tracer
	meter         metric.Meter
	leaseAcquire  metric.Int64Counter
	leaseFenced   metric.Int64Counter
	txCreate      metric.Int64Counter
	txSubmit      metric.Int64Counter
	receiptCheck  metric.Int64Counter
	resubmit      metric.Int64Counter
	stuck         metric.Int64Counter
	reorg         metric.Int64Counter
	readiness     metric.Int64Counter
	rateLimited   metric.Int64Counter
	reprice       metric.Int64Counter
	holesFilled   metric.Int64Counter
	pruned        metric.Int64Counter
	quarantined   metric.Int64Counter
	recognised    metric.Int64Counter
	serverChanged metric.Int64Counter
	recovered     metric.Int64Counter
	policyDenied  metric.Int64Counter
	approvalVote  metric.Int64Counter
	approvalEnd   metric.Int64Counter
	webhook       metric.Int64Counter
	// spent is a float counter: wei outgrow an int64 after 9.2 ETH.
	spent metric.Float64Counter
	// chain holds the chain_id attribute of a chain's view (ForChain); empty for the
	// instruments of the process as a whole.
	chain []attribute.KeyValue
	// results holds the attributes of each result label (chain_id and result) once made:
	// a set is sorted and hashed when made, and every create records two measurements.
	results       *sync.Map // result label -> metric.MeasurementOption
	batchSize     metric.Int64Histogram
	writerPhase   metric.Float64Histogram
	phases        map[string]metric.MeasurementOption // writer phase -> its attributes, made by ForChain
	createLatency metric.Float64Histogram
	recovery      metric.Float64Histogram
}

// NewMetrics creates the instruments on provider.
func NewMetrics(provider metric.MeterProvider) (*Metrics, error) {
	if provider == nil {
		provider = noop.NewMeterProvider()
	}
	m := &Metrics{meter: provider.Meter("github.com/bionicotaku/txmanager-service"), Tracer: tracenoop.NewTracerProvider().Tracer(""), results: &sync.Map{}}
	counters := []struct {
		dst  *metric.Int64Counter
		name string
		help string
	}{
		{&m.leaseAcquire, LeaseAcquireTotal, "Lease acquisitions and renewals by result (acquired, renewed, not_leader, error)."},
		{&m.leaseFenced, LeaseFencedTotal, "Critical writes rejected because the writer no longer held the signer's lease."},
		{&m.txCreate, TxCreateTotal, "Create requests by result (created, existing, conflict, invalid, not_leader, fenced, unavailable, error)."},
		{&m.txSubmit, TxSubmitTotal, "Broadcasts by result."},
		{&m.receiptCheck, ReceiptCheckTotal, "Receipt look-ups by result (found, not_found, error)."},
		{&m.resubmit, ResubmitTotal, "Rebroadcasts by result."},
		{&m.stuck, StuckTotal, "Head-of-line transactions detected as stuck, by action."},
		{&m.reorg, ReorgTotal, "Receipts whose block left the canonical chain."},
		{&m.readiness, ReadinessProbeTotal, "Readiness probes of the database and chain by result (ready, not_ready); /readyz answers from the latest."},
		{&m.quarantined, SignerQuarantineTotal, "Signers quarantined because the chain held nonces the database did not know."},
		{&m.recognised, RecognisedTotal, "Nonces found taken on chain by a transaction without an attempt on record, by result: ours (recognised and followed) or foreign (FAILED_FINAL)."},
		{&m.pruned, RetentionPrunedTotal, "Rows retention deleted past its horizon, by kind (transaction, attempt, completion)."},
		{&m.holesFilled, NonceHoleFilledTotal, "Placeholder transactions created to fill nonce holes (nonces nothing held below a signer's open ones)."},
		{&m.reprice, RepriceTotal, "Rebroadcasts that found the transaction underpriced, by result: raised (a replacement at higher fees) or at_cap (the caps left no room)."},
		{&m.rateLimited, RateLimitedTotal, "Requests refused with 429 because their credential exceeded server.rateLimit."},
		{&m.recovered, RecoveredTxTotal, "Transactions the database lost and reconciliation found on chain, by result: recorded (kept as unclaimed rows), adopted (a retried create with the same intent was answered with one), expired (the adoption window passed)."},
		{&m.policyDenied, PolicyDeniedTotal, "Creates a spending policy refused, by rule (destination, selector, maxValuePerTx, maxFeePerGas, windowValue, windowFee, minRemainingBalance) and scope kind (signer, credential)."},
		{&m.approvalVote, ApprovalDecisionsTotal, "Votes approvers cast on intents waiting for approval, by decision (approve, reject)."},
		{&m.approvalEnd, ApprovalsEndedTotal, "Intents sent for approval that left the wait, by outcome: ADMITTED (given a nonce), EXPIRED, REJECTED, REFUSED (approved, then refused by the create path for good)."},
		{&m.webhook, WebhookDeliveriesTotal, "Webhook deliveries, by result (delivered: the receiver answered 2xx; failed: it did not, or could not be reached) and retry (true: the event had failed before, so the receiver may see it twice)."},
		{&m.serverChanged, DatabaseServerChanges, "New database connections that reached another server than before: a failover, switchover or restart (cached nonces are then dropped)."},
	}
	var err error
	for _, c := range counters {
		if *c.dst, err = m.meter.Int64Counter(c.name, metric.WithDescription(c.help)); err != nil {
			return nil, fmt.Errorf("telemetry: %s: %w", c.name, err)
		}
	}
	if m.spent, err = m.meter.Float64Counter(SignerSpentWeiTotal, metric.WithDescription(
		"Fees signers paid for their final transactions, in wei, by signer and part: l2 (gas used x effective price) or l1 (an OP-stack chain's L1 data fee); values sent are not counted.")); err != nil {
		return nil, fmt.Errorf("telemetry: %s: %w", SignerSpentWeiTotal, err)
	}
	// The series that only count trouble start at zero per chain (ForChain), where they are
	// recorded; a process-wide zero beside them would be a second series that never moves.
	ctx := context.Background()
	m.rateLimited.Add(ctx, 0)
	m.serverChanged.Add(ctx, 0)
	if m.batchSize, err = m.meter.Int64Histogram("writer_batch_size",
		metric.WithDescription("Operations per writer batch transaction."),
		metric.WithExplicitBucketBoundaries(1, 2, 4, 8, 16, 32, 64, 128, 256, 512)); err != nil {
		return nil, err
	}
	// Fine buckets between 1 and 50 ms, where a create's time goes when the service is busy:
	// the phases say whether a slow create waited for the batch ahead of it, for its own
	// statements, or for its commit's flush to disk.
	if m.writerPhase, err = m.meter.Float64Histogram(WriterPhaseSeconds,
		metric.WithUnit("s"),
		metric.WithDescription("Where a create's time goes in the writer, by phase: queued (from the create reaching its worker to its batch starting, once per create), prepare (the batch's leases and nonce checks), statements (the batch transaction's statements) and commit (its commit, which waits for the flush to disk), once per batch."),
		metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.05, 0.1, 0.25, 0.5, 1, 2.5)); err != nil {
		return nil, err
	}
	m.phases = m.phaseAttributes()
	if m.createLatency, err = m.meter.Float64Histogram("tx_create_duration_seconds",
		metric.WithUnit("s"),
		metric.WithDescription("Create request latency inside the service."),
		metric.WithExplicitBucketBoundaries(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)); err != nil {
		return nil, err
	}
	if m.recovery, err = m.meter.Float64Histogram(SignerRecoverySeconds,
		metric.WithUnit("s"),
		metric.WithDescription("From a signer's quarantine to its release, once every transaction the chain holds at the nonces the database lost was recorded."),
		metric.WithExplicitBucketBoundaries(1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)); err != nil {
		return nil, err
	}
	return m, nil
}

// Noop returns instruments that record nothing.
func Noop() *Metrics {
	m, _ := NewMetrics(noop.NewMeterProvider())
	return m
}

// with are the measurement's attributes: the chain's (a chain's view) and kv.
func (m *Metrics) with(kv ...attribute.KeyValue) metric.MeasurementOption {
	if len(m.chain) == 0 {
		return metric.WithAttributes(kv...)
	}
	return metric.WithAttributes(append(slices.Clip(m.chain), kv...)...)
}

// result is the measurement option for result label r (a small fixed set of labels).
func (m *Metrics) result(r string) metric.MeasurementOption {
	if opt, ok := m.results.Load(r); ok {
		return opt.(metric.MeasurementOption)
	}
	set := attribute.NewSet(append(slices.Clip(m.chain), attribute.String("result", r))...)
	opt, _ := m.results.LoadOrStore(r, metric.WithAttributeSet(set))
	return opt.(metric.MeasurementOption)
}

// ForChain is the view of the instruments a chain's components record through: every
// measurement and gauge carries chain_id, and every span the chain's tracer starts too.
func (m *Metrics) ForChain(chainID uint64) *Metrics {
	view := *m
	view.chain = []attribute.KeyValue{attribute.Int64("chain_id", int64(chainID))}
	view.results = &sync.Map{}
	view.Tracer = chainTracer{Tracer: m.Tracer, attrs: view.chain}
	view.phases = view.phaseAttributes()
	view.zeroSeries(context.Background())
	return &view
}

// chainTracer starts spans with the chain's attributes.
type chainTracer struct {
	trace.Tracer
	attrs []attribute.KeyValue
}

func (t chainTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	return t.Tracer.Start(ctx, name, append(opts, trace.WithAttributes(t.attrs...))...)
}

// zeroSeries starts the series that only count trouble at zero, so dashboards and alerts
// see them before the first incident.
func (m *Metrics) zeroSeries(ctx context.Context) {
	m.leaseFenced.Add(ctx, 0, m.with())
	m.stuck.Add(ctx, 0, m.with(attribute.String("action", "noop")))
	m.reorg.Add(ctx, 0, m.with())
	m.reprice.Add(ctx, 0, m.result("at_cap"))
	m.holesFilled.Add(ctx, 0, m.with())
	m.quarantined.Add(ctx, 0, m.with())
	m.resubmit.Add(ctx, 0, m.result("submitted"))
	m.txSubmit.Add(ctx, 0, m.result(UnknownAnswerResult))
	for _, r := range []string{"recorded", "adopted", "expired"} {
		m.recovered.Add(ctx, 0, m.result(r))
	}
}

func (m *Metrics) LeaseAcquire(ctx context.Context, r string) {
	m.leaseAcquire.Add(ctx, 1, m.result(r))
}
func (m *Metrics) Fenced(ctx context.Context) { m.leaseFenced.Add(ctx, 1, m.with()) }
func (m *Metrics) TxCreate(ctx context.Context, r string, seconds float64) {
	m.txCreate.Add(ctx, 1, m.result(r))
	m.createLatency.Record(ctx, seconds, m.result(r))
}
func (m *Metrics) TxSubmit(ctx context.Context, r string) { m.txSubmit.Add(ctx, 1, m.result(r)) }
func (m *Metrics) ReceiptCheck(ctx context.Context, r string) {
	m.receiptCheck.Add(ctx, 1, m.result(r))
}
func (m *Metrics) Resubmit(ctx context.Context, r string) { m.resubmit.Add(ctx, 1, m.result(r)) }
func (m *Metrics) Stuck(ctx context.Context, action string) {
	m.stuck.Add(ctx, 1, m.with(attribute.String("action", action)))
}
func (m *Metrics) Reorg(ctx context.Context) { m.reorg.Add(ctx, 1, m.with()) }

// SignerSpent counts the fee a final transaction of signer cost, by part (nil parts: the
// node did not say, or none).
func (m *Metrics) SignerSpent(ctx context.Context, signer string, l2, l1 *big.Int) {
	for part, wei := range map[string]*big.Int{"l2": l2, "l1": l1} {
		if wei == nil || wei.Sign() <= 0 {
			continue
		}
		v, _ := new(big.Float).SetInt(wei).Float64()
		m.spent.Add(ctx, v, metric.WithAttributes(append(slices.Clone(m.chain), attribute.String("signer", signer), attribute.String("part", part))...))
	}
}
func (m *Metrics) ReadinessProbe(ctx context.Context, r string) { m.readiness.Add(ctx, 1, m.result(r)) }
func (m *Metrics) RateLimited(ctx context.Context)              { m.rateLimited.Add(ctx, 1, m.with()) }
func (m *Metrics) Reprice(ctx context.Context, r string)        { m.reprice.Add(ctx, 1, m.result(r)) }
func (m *Metrics) NonceHolesFilled(ctx context.Context, n int) {
	m.holesFilled.Add(ctx, int64(n), m.with())
}
func (m *Metrics) Recovered(ctx context.Context, r string, n int) {
	m.recovered.Add(ctx, int64(n), m.result(r))
}

// WebhookDelivery counts one webhook delivery attempt's result.
func (m *Metrics) WebhookDelivery(ctx context.Context, result string, retry bool) {
	m.webhook.Add(ctx, 1, m.with(attribute.String("result", result), attribute.Bool("retry", retry)))
}

// ApprovalVote counts a vote on an approval.
func (m *Metrics) ApprovalVote(ctx context.Context, approve bool) {
	decision := "reject"
	if approve {
		decision = "approve"
	}
	m.approvalVote.Add(ctx, 1, m.with(attribute.String("decision", decision)))
}

// ApprovalEnded counts an approval leaving the wait, by its outcome.
func (m *Metrics) ApprovalEnded(ctx context.Context, outcome string, n int) {
	m.approvalEnd.Add(ctx, int64(n), m.with(attribute.String("outcome", outcome)))
}

// PolicyDenied counts a create a spending policy refused.
func (m *Metrics) PolicyDenied(ctx context.Context, rule, scopeKind string) {
	m.policyDenied.Add(ctx, 1, m.with(attribute.String("rule", rule), attribute.String("scope", scopeKind)))
}
func (m *Metrics) Quarantined(ctx context.Context) { m.quarantined.Add(ctx, 1, m.with()) }

// RecoveryFinished records how long a signer was quarantined until its recovery released it.
func (m *Metrics) RecoveryFinished(ctx context.Context, held time.Duration) {
	m.recovery.Record(ctx, held.Seconds(), m.with())
}
func (m *Metrics) DatabaseServerChanged(ctx context.Context) { m.serverChanged.Add(ctx, 1, m.with()) }
func (m *Metrics) NonceTakenResolved(ctx context.Context, r string) {
	m.recognised.Add(ctx, 1, m.result(r))
}
func (m *Metrics) Pruned(ctx context.Context, kind string, n int) {
	m.pruned.Add(ctx, int64(n), m.with(attribute.String("kind", kind)))
}
func (m *Metrics) WriterBatch(ctx context.Context, ops int) {
	m.batchSize.Record(ctx, int64(ops), m.with())
}

// Writer phases (writer_phase_seconds).
const (
	PhaseQueued     = "queued"
	PhasePrepare    = "prepare"
	PhaseStatements = "statements"
	PhaseCommit     = "commit"
)

// phaseAttributes makes each writer phase's attribute set once: a create records one.
func (m *Metrics) phaseAttributes() map[string]metric.MeasurementOption {
	phases := map[string]metric.MeasurementOption{}
	for _, phase := range []string{PhaseQueued, PhasePrepare, PhaseStatements, PhaseCommit} {
		phases[phase] = metric.WithAttributeSet(attribute.NewSet(append(slices.Clip(m.chain), attribute.String("phase", phase))...))
	}
	return phases
}

// WriterPhase records how long one create (queued) or one batch (the other phases) spent
// in a writer phase.
func (m *Metrics) WriterPhase(ctx context.Context, phase string, d time.Duration) {
	opt, ok := m.phases[phase]
	if !ok {
		opt = m.with(attribute.String("phase", phase))
	}
	m.writerPhase.Record(ctx, d.Seconds(), opt)
}

// RegisterGauge exposes an integer gauge whose value is read from observe at collection time.
func (m *Metrics) RegisterGauge(name, help string, observe func(ctx context.Context, record func(value int64, attrs ...attribute.KeyValue))) error {
	_, err := m.meter.Int64ObservableGauge(name, metric.WithDescription(help),
		metric.WithInt64Callback(func(ctx context.Context, o metric.Int64Observer) error {
			observe(ctx, func(value int64, attrs ...attribute.KeyValue) { o.Observe(value, m.with(attrs...)) })
			return nil
		}))
	return err
}

// RegisterFloatGauge is RegisterGauge for float values.
func (m *Metrics) RegisterFloatGauge(name, help string, observe func(ctx context.Context, record func(value float64, attrs ...attribute.KeyValue))) error {
	_, err := m.meter.Float64ObservableGauge(name, metric.WithDescription(help),
		metric.WithFloat64Callback(func(ctx context.Context, o metric.Float64Observer) error {
			observe(ctx, func(value float64, attrs ...attribute.KeyValue) { o.Observe(value, m.with(attrs...)) })
			return nil
		}))
	return err
}

// RegisterCounter exposes a monotonic integer counter whose running total is read from
// observe at collection time, for totals another component keeps (the connection pool's).
func (m *Metrics) RegisterCounter(name, help string, observe func() int64) error {
	_, err := m.meter.Int64ObservableCounter(name, metric.WithDescription(help),
		metric.WithInt64Callback(func(_ context.Context, o metric.Int64Observer) error {
			o.Observe(observe(), m.with())
			return nil
		}))
	return err
}

// RegisterFloatCounter is RegisterCounter for float totals.
func (m *Metrics) RegisterFloatCounter(name, help string, observe func() float64) error {
	_, err := m.meter.Float64ObservableCounter(name, metric.WithDescription(help),
		metric.WithFloat64Callback(func(_ context.Context, o metric.Float64Observer) error {
			o.Observe(observe(), m.with())
			return nil
		}))
	return err
}

// Meter is the service's meter, for instruments other packages own (server metrics).
func (m *Metrics) Meter() metric.Meter { return m.meter }
