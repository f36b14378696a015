package writer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/ethereum/go-ethereum/common"
	"github.com/go-kratos/kratos/v2/log"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// NonceConfig is the chain term of max(chain, cache, db).
type NonceConfig struct {
	// ChainQuery enables the chain term.
	ChainQuery bool
	// AdoptUnknownChainNonces allocates above nonces the chain holds that the database does
	// not know (a key also used outside the service) instead of quarantining the signer.
	AdoptUnknownChainNonces bool
	// StateTimeout: the chain is consulted again when the cache's chain view is older.
	StateTimeout time.Duration
	// RecoverByIntent: a quarantined signer is reconciled by the pipeline on its own
	// (recovery.mode adopt-by-intent), so a create meanwhile is told to retry shortly, not
	// that a person must act.
	RecoverByIntent bool
}

// Allocator writes one writer batch: for each signer, within ONE database
// transaction, it checks the lease, re-checks idempotency, assigns nonces, inserts the
// transactions and advances the cursor, all fenced (docs/design.md#the-create-path).
type Allocator struct {
	tx      txmanager.Manager
	store   services.AllocationStore
	leases  *services.LeaseManager
	chain   services.NonceSource
	chainID uint64
	cache   *services.NonceCache
	nonce   NonceConfig
	clock   services.Clock
	notify  services.SubmitNotifier
	metrics *telemetry.Metrics
	log     *log.Helper
	// lostCursors are the signers whose cursor row the database lost while this node held
	// nonces it had allocated (signer -> the lease token then): until a cursor is written
	// again, a missing one is read as 0, not as a first use (lostCursor).
	lostCursors sync.Map
}

// NewAllocator builds the allocator and hooks nonce-cache eviction to lease loss.
func NewAllocator(tx txmanager.Manager, store services.AllocationStore, leases *services.LeaseManager, chain services.NonceSource, chainID services.ChainID, cache *services.NonceCache, nonce NonceConfig,
	clock services.Clock, notify services.SubmitNotifier, metrics *telemetry.Metrics, logger log.Logger) *Allocator {
	leases.OnLost(cache.Evict)
	return &Allocator{
		tx: tx, store: store, leases: leases, chain: chain, chainID: chainID.Uint64(), cache: cache, nonce: nonce, clock: clock, notify: notify, metrics: metrics,
		log: log.NewHelper(log.With(logger, "component", "allocator", "node_id", leases.Node())),
	}
}

// batchOptions are the batch transaction's. Its statements take their input as arrays and
// join it on keys, so one plan serves every batch; left to choose, PostgreSQL went on
// making custom plans for the allocation statement (batch sizes vary, and so do their
// estimates), and planning took a fifth to a quarter of its time.
var batchOptions = txmanager.DefaultOptions().WithTraceName("writer.batch").WithRetries(2).
	WithSettings(txmanager.Setting{Name: "plan_cache_mode", Value: "force_generic_plan"})

// signerBatch is the part of a batch that belongs to one signer.
type signerBatch struct {
	signer      common.Address
	key         string
	lease       domain.Lease
	ops         []*Op
	chainNext   *uint64
	chainAsked  time.Time
	cachedNext  *uint64
	cacheAsked  time.Time
	serverEpoch uint64      // the database server epoch when the batch read the cache
	outcome     []opOutcome // parallel to ops, filled inside the transaction
	allocated   []domain.ManagedTx
	nextAfter   uint64
	adopted     int
	clear       bool // written by the batch's one statement (writeClear)
	fenced      bool
	fencedWrite string
	// policyDenied are the refusals of the spending policies, counted after commit.
	policyDenied []denial
	// approvals are the creates the policies sent for approval instead of a nonce.
	approvals []requestedApproval
}

type opOutcome struct {
	tx      domain.ManagedTx
	created bool
	// adopted: tx is a recovered transaction this op adopted.
	adopted bool
	err     error
}

// AllocateBatch resolves every op of the batch.
func (a *Allocator) AllocateBatch(ctx context.Context, ops []*Op) {
	ctx, span := a.metrics.Tracer.Start(ctx, "writer.batch",
		trace.WithAttributes(attribute.Int("writer.ops", len(ops))), trace.WithLinks(requestLinks(ops)...))
	defer span.End()
	a.metrics.WriterBatch(ctx, len(ops))
	started := time.Now()
	for _, op := range ops {
		if !op.queuedAt.IsZero() {
			a.metrics.WriterPhase(ctx, telemetry.PhaseQueued, started.Sub(op.queuedAt))
		}
	}
	batches := a.prepare(ctx, ops)
	if len(batches) == 0 {
		return
	}
	prepared := time.Now()
	a.metrics.WriterPhase(ctx, telemetry.PhasePrepare, prepared.Sub(started))
	var written time.Time // when the last attempt's statements were done; commit follows
	err := a.tx.WithinTx(ctx, batchOptions,
		func(ctx context.Context, sess txmanager.Session) error {
			defer func() { written = time.Now() }()
			// Before any statement reads a policy (it goes out with BEGIN).
			if err := a.store.HoldFirstPolicies(ctx, sess); err != nil {
				return err
			}
			if err := a.writeClear(ctx, sess, batches); err != nil {
				return err
			}
			if err := a.lockPoliciesOfFullPath(ctx, sess, batches); err != nil {
				return err
			}
			for _, b := range batches {
				if b.clear {
					continue
				}
				if err := a.writeSigner(ctx, sess, b); err != nil {
					return err
				}
			}
			return nil
		})
	if err != nil {
		// Nothing of the batch was written: forget the cached nonces of every signer in it
		// so the next batch re-reads the database.
		for _, b := range batches {
			a.cache.Evict(b.key)
		}
		var fenced *domain.FencedError
		if errors.As(err, &fenced) {
			for _, b := range batches {
				if b.key == fenced.Signer {
					a.leases.Fenced(ctx, b.lease, fenced.Write)
				}
			}
		}
		span.SetStatus(codes.Error, err.Error())
		a.log.WithContext(ctx).Errorw("msg", "writer batch failed", "ops", len(ops), "signers", len(batches), "error", err.Error())
		failure := batchFailure(err)
		for _, b := range batches {
			for _, op := range b.ops {
				op.Fail(failure)
			}
		}
		return
	}
	committed := time.Now()
	a.metrics.WriterPhase(ctx, telemetry.PhaseStatements, written.Sub(prepared))
	a.metrics.WriterPhase(ctx, telemetry.PhaseCommit, committed.Sub(written))
	for _, b := range batches {
		a.finish(ctx, b)
	}
}

// prepare groups ops by signer, obtains each signer's lease and, outside the database
// transaction, the chain's pending nonce where the cache is missing or stale.
func (a *Allocator) prepare(ctx context.Context, ops []*Op) []*signerBatch {
	bySigner := map[string]*signerBatch{}
	var order []*signerBatch
	for _, op := range ops {
		key := op.Signer()
		b, ok := bySigner[key]
		if !ok {
			b = &signerBatch{signer: op.Request.Signer, key: key}
			bySigner[key] = b
			order = append(order, b)
		}
		b.ops = append(b.ops, op)
	}
	leased := order[:0]
	for _, b := range order {
		lease, err := a.leases.Acquire(ctx, b.key)
		if err != nil {
			for _, op := range b.ops {
				op.Fail(err)
			}
			continue
		}
		b.lease = lease
		b.serverEpoch = a.cache.Epoch()
		if next, checkedAt, ok := a.cache.Get(b.key); ok {
			b.cachedNext, b.cacheAsked = &next, checkedAt
		}
		b.chainAsked = b.cacheAsked
		leased = append(leased, b)
	}
	// The signers' chain queries run at once: each has the chain's read deadline, so a
	// batch waits at most one deadline however many signers it holds. Each asks every
	// endpoint and takes the highest answer: a chain nonce above the cursor quarantines the
	// signer, and a lost transaction may wait in one node's pool only.
	now := a.clock.Now()
	chainErrs := make([]error, len(leased))
	var wg sync.WaitGroup
	for i, b := range leased {
		if !a.nonce.ChainQuery || (b.cachedNext != nil && now.Sub(b.cacheAsked) <= a.nonce.StateTimeout) {
			continue
		}
		wg.Go(func() {
			pending, err := services.HighestPendingNonce(ctx, a.chain, b.signer)
			if err != nil {
				chainErrs[i] = err
				return
			}
			b.chainNext, b.chainAsked = &pending, now
		})
	}
	wg.Wait()
	ready := leased[:0]
	for i, b := range leased {
		if chainErrs[i] != nil {
			failure := &domain.UnavailableError{Reason: "chain pending nonce", RetryAfter: time.Second, Err: chainErrs[i]}
			for _, op := range b.ops {
				op.Fail(failure)
			}
			continue
		}
		ready = append(ready, b)
	}
	return ready
}

// writeSigner does one signer's part inside the batch transaction. It is re-run as a whole
// when the transaction is retried, so it recomputes everything it records.
func (a *Allocator) writeSigner(ctx context.Context, sess txmanager.Session, b *signerBatch) error {
	b.fenced, b.policyDenied, b.approvals = false, nil, nil
	requestIDs := b.requestIDs()
	b.reset()
	state, err := a.store.LockLeaseAndReadCursor(ctx, sess, b.lease, requestIDs)
	cursor := state.Next
	var fenced *domain.FencedError
	if errors.As(err, &fenced) {
		// Only this signer loses; it has written nothing, and the lease row is not locked
		// by us, so the other signers of the batch carry on.
		b.fenced, b.fencedWrite = true, fenced.Write
		for i := range b.ops {
			b.outcome[i].err = err
		}
		return nil
	}
	if err != nil {
		return err
	}

	if state.Retired {
		// Retiring or retired in the roster, read under the row lock a retirement waits
		// for: whatever this node's last poll saw, nothing is allocated after it.
		err := fmt.Errorf("%w: %s", domain.ErrSignerRetired, b.key)
		for i := range b.ops {
			b.outcome[i].err = err
		}
		return nil
	}
	state = a.lostCursor(b, state)
	if lost := a.lostAllocations(b, state); lost != nil {
		for i := range b.ops {
			b.outcome[i].err = lost
		}
		return nil
	}
	if quarantined, err := a.quarantined(ctx, sess, b, state); quarantined || err != nil {
		return err
	}
	existing, err := a.existingByRequestID(ctx, sess, b.signer, requestIDs, state)
	if err != nil {
		return err
	}
	pool, err := a.adoptable(ctx, sess, b, state, existing)
	if err != nil {
		return err
	}
	if state.Paused {
		// Retries of requests on record are still answered; nothing new is allocated, and no
		// recovered transaction is adopted (a retry of a lost request is answered once the
		// signer is resumed).
		a.assign(b, existing, nil, &policyGate{refuseAll: fmt.Errorf("%w: %s", domain.ErrSignerPaused, b.key)}, 0)
		return nil
	}
	gate, err := a.policyGate(ctx, sess, b)
	if err != nil {
		return err
	}
	adoptions := a.assign(b, existing, pool, gate, domain.NextNonce(b.chainNext, b.cachedNext, cursor))
	b.policyDenied = gate.deniedRules()
	if len(adoptions) > 0 {
		if err := a.store.ClaimUnclaimed(ctx, sess, b.lease, adoptions); err != nil {
			return err
		}
	}
	if spends := gate.spends(); len(spends) > 0 {
		if err := a.store.AddSpend(ctx, sess, spends); err != nil {
			return err
		}
	}
	if err := a.requestApprovals(ctx, sess, b); err != nil {
		return err
	}
	if len(b.allocated) > 0 {
		if err := a.store.WriteAllocation(ctx, sess, b.lease, b.allocated, b.nextAfter); err != nil {
			return err
		}
	}
	// In the allocation's transaction: an approval is admitted exactly when its transaction
	// is written or adopted.
	if admitted := b.admittedApprovals(); len(admitted) > 0 {
		return a.store.AdmitApprovals(ctx, sess, admitted)
	}
	return nil
}

// finish runs after commit: record the new cursor in the cache and answer the ops.
func (a *Allocator) finish(ctx context.Context, b *signerBatch) {
	for _, d := range b.policyDenied {
		a.metrics.PolicyDenied(ctx, d.rule, string(d.scope))
	}
	if b.adopted > 0 && !b.fenced {
		a.metrics.Recovered(ctx, "adopted", b.adopted)
		a.log.WithContext(ctx).Warnw("msg", "retried creates answered with their transactions recovered from the chain", "signer", b.key,
			"fencing_token", b.lease.Token, "count", b.adopted)
	}
	if b.fenced {
		a.cache.Evict(b.key)
		a.leases.Fenced(ctx, b.lease, b.fencedWrite)
	} else if len(b.allocated) > 0 {
		a.cache.Put(b.key, b.nextAfter, b.chainAsked, b.serverEpoch)
		first := b.allocated[0]
		a.log.WithContext(ctx).Infow("msg", "nonces allocated", "signer", b.key, "fencing_token", b.lease.Token,
			"count", len(b.allocated), "first_nonce", first.Nonce, "first_tx_id", first.ID.String(), "state", string(domain.StateAllocated))
		if a.notify != nil {
			a.notify.NotifyAllocated(b.lease, b.nextAfter)
		}
	}
	for i, op := range b.ops {
		o := b.outcome[i]
		op.resolve(o.tx, o.created, o.err)
	}
}

// batchFailure turns a failed batch transaction into the error each op reports.
func batchFailure(err error) error {
	var fenced *domain.FencedError
	if errors.As(err, &fenced) {
		return err
	}
	if errors.Is(err, txmanager.ErrCommitOutcomeUnknown) {
		return fmt.Errorf("%w: %w", domain.ErrOutcomeUnknown, err)
	}
	return &domain.UnavailableError{Reason: "writer batch failed", RetryAfter: time.Second, Err: err}
}

// requestLinks links a batch to the sampled requests whose ops it carries.
func requestLinks(ops []*Op) []trace.Link {
	links := make([]trace.Link, 0, len(ops))
	for _, op := range ops {
		if op.requestSpan.IsValid() {
			links = append(links, trace.Link{SpanContext: op.requestSpan})
		}
	}
	return links
}
