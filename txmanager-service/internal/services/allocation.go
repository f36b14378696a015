package services

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/ethereum/go-ethereum/common"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// AllocationOp is one create request travelling through the TransactionWriter. The writer
// resolves it exactly once: with a new transaction, an existing one (idempotent replay), or
// an error.
type AllocationOp struct {
	Request     domain.CreateRequest
	Fingerprint [32]byte
	// GasLimit is the effective gas limit (the client's or the estimate).
	GasLimit uint64

	// requestSpan is the span of the request that made the op: the writer batch, which
	// runs on the worker's context, links to it so a request's trace leads to its batch.
	requestSpan trace.SpanContext

	done    chan struct{}
	tx      domain.ManagedTx
	created bool
	err     error
}

// NewAllocationOp prepares an op for req, made while serving the request in ctx.
func NewAllocationOp(ctx context.Context, req domain.CreateRequest, gasLimit uint64) *AllocationOp {
	if req.SignerHex == "" {
		req.SignerHex = req.Signer.Hex()
	}
	return &AllocationOp{
		Request:     req,
		Fingerprint: req.Fingerprint(),
		GasLimit:    gasLimit,
		requestSpan: trace.SpanContextFromContext(ctx),
		done:        make(chan struct{}),
	}
}

// Signer is the key the writer routes by (EIP-55 form).
func (op *AllocationOp) Signer() string { return op.Request.SignerHex }

// Wait blocks until the op is resolved or ctx ends.
func (op *AllocationOp) Wait(ctx context.Context) (domain.ManagedTx, bool, error) {
	select {
	case <-op.done:
		return op.tx, op.created, op.err
	case <-ctx.Done():
		return domain.ManagedTx{}, false, ctx.Err()
	}
}

func (op *AllocationOp) resolve(tx domain.ManagedTx, created bool, err error) {
	op.tx, op.created, op.err = tx, created, err
	close(op.done)
}

// Fail resolves op with err (used by the writer when it cannot take the op).
func (op *AllocationOp) Fail(err error) { op.resolve(domain.ManagedTx{}, false, err) }

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

// Allocator writes one TransactionWriter batch: for each signer, within ONE database
// transaction, it checks the lease, re-checks idempotency, assigns nonces, inserts the
// transactions and advances the cursor, all fenced (docs/design.md#the-create-path).
type Allocator struct {
	tx      txmanager.Manager
	store   AllocationStore
	leases  *LeaseManager
	chain   Chain
	chainID uint64
	cache   *NonceCache
	nonce   NonceConfig
	clock   Clock
	notify  SubmitNotifier
	metrics *telemetry.Metrics
	log     *log.Helper
}

// NewAllocator builds the allocator and hooks nonce-cache eviction to lease loss.
func NewAllocator(tx txmanager.Manager, store AllocationStore, leases *LeaseManager, chain Chain, chainID ChainID, cache *NonceCache, nonce NonceConfig,
	clock Clock, notify SubmitNotifier, metrics *telemetry.Metrics, logger log.Logger) *Allocator {
	leases.OnLost(cache.Evict)
	return &Allocator{
		tx: tx, store: store, leases: leases, chain: chain, chainID: chainID.Uint64(), cache: cache, nonce: nonce, clock: clock, notify: notify, metrics: metrics,
		log: log.NewHelper(log.With(logger, "component", "allocator", "node_id", leases.Node())),
	}
}

// signerBatch is the part of a batch that belongs to one signer.
type signerBatch struct {
	signer      common.Address
	key         string
	lease       domain.Lease
	ops         []*AllocationOp
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
}

type opOutcome struct {
	tx      domain.ManagedTx
	created bool
	err     error
}

// AllocateBatch resolves every op of the batch.
func (a *Allocator) AllocateBatch(ctx context.Context, ops []*AllocationOp) {
	ctx, span := a.metrics.Tracer.Start(ctx, "writer.batch",
		trace.WithAttributes(attribute.Int("writer.ops", len(ops))), trace.WithLinks(requestLinks(ops)...))
	defer span.End()
	a.metrics.WriterBatch(ctx, len(ops))
	batches := a.prepare(ctx, ops)
	if len(batches) == 0 {
		return
	}
	err := a.tx.WithinTx(ctx, txmanager.DefaultOptions().WithTraceName("writer.batch").WithRetries(2),
		func(ctx context.Context, sess txmanager.Session) error {
			if err := a.writeClear(ctx, sess, batches); err != nil {
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
	for _, b := range batches {
		a.finish(ctx, b)
	}
}

// prepare groups ops by signer, obtains each signer's lease and, outside the database
// transaction, the chain's pending nonce where the cache is missing or stale.
func (a *Allocator) prepare(ctx context.Context, ops []*AllocationOp) []*signerBatch {
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
	// batch waits at most one deadline however many signers it holds.
	now := a.clock.Now()
	chainErrs := make([]error, len(leased))
	var wg sync.WaitGroup
	for i, b := range leased {
		if !a.nonce.ChainQuery || (b.cachedNext != nil && now.Sub(b.cacheAsked) <= a.nonce.StateTimeout) {
			continue
		}
		wg.Go(func() {
			pending, err := a.chain.PendingNonceAt(ctx, b.signer)
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
	b.fenced = false
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
	adoptions := a.assign(b, existing, pool, domain.NextNonce(b.chainNext, b.cachedNext, cursor))
	if len(adoptions) > 0 {
		if err := a.store.ClaimUnclaimed(ctx, sess, b.lease, adoptions); err != nil {
			return err
		}
	}
	if len(b.allocated) == 0 {
		return nil
	}
	return a.store.WriteAllocation(ctx, sess, b.lease, b.allocated, b.nextAfter)
}

// assign answers each op of the batch, on a reset batch: a replay of a transaction on
// record (existing) or of an earlier op of the batch with the same request id, an adoption
// of a recovered transaction (pool), or a new transaction at the next nonce from next. It
// records the new ones and the nonce after them on the batch and returns the adoptions.
func (a *Allocator) assign(b *signerBatch, existing map[string]domain.ManagedTx, pool *adoptionPool, next uint64) []Adoption {
	var adoptions []Adoption
	// PostgreSQL keeps microseconds: round here so the answer equals what a read returns.
	now := a.clock.Now().UTC().Truncate(time.Microsecond)
	firstInBatch := map[string]int{}
	for i, op := range b.ops {
		id := op.Request.RequestID
		if id != "" {
			if tx, ok := existing[id]; ok {
				b.outcome[i] = replayOutcome(tx, op.Fingerprint, id)
				continue
			}
			if j, ok := firstInBatch[id]; ok {
				// Same requestId twice in one batch: the later op answers like a replay of
				// the first and consumes no nonce.
				b.outcome[i] = replayOutcome(b.outcome[j].tx, op.Fingerprint, id)
				continue
			}
			firstInBatch[id] = i
			if tx, ok := pool.take(op.Request.RecoveryKey(), op.Request.Intent.GasLimit); ok {
				// A lost request's retry: answered with its transaction on chain.
				tx.RequestID, tx.Fingerprint, tx.UnclaimedUntil = id, op.Fingerprint, nil
				b.outcome[i] = opOutcome{tx: tx}
				adoptions = append(adoptions, Adoption{TxID: tx.ID, RequestID: id, Fingerprint: op.Fingerprint})
				continue
			}
		}
		b.outcome[i] = opOutcome{tx: a.newTx(b, op, next, now), created: true}
		b.allocated = append(b.allocated, b.outcome[i].tx)
		next++
	}
	b.nextAfter, b.adopted = next, len(adoptions)
	return adoptions
}

// writeClear allocates, in one statement for the whole batch, the part of each signer whose
// cached cursor is fresh enough not to ask the chain, numbering its creates from it, and
// marks the signers it wrote (clear). The statement writes a signer's part only if the
// database agrees the full path would write exactly the same for it (WriteClearAllocations'
// gate: the lease held, the cursor where the cache says, the signer active and not
// quarantined, nothing to adopt, no request id on record). With those conditions the full
// path's max(chain, cache, db) is the cached value (no chain reading, cursor equal to the
// cache), no quarantine applies, and its assignment (assign) has nothing on record to
// replay and nothing to adopt, so its outcome is this one. A signer turned away has had
// nothing written and takes the full path (writeSigner) in the same transaction.
func (a *Allocator) writeClear(ctx context.Context, sess txmanager.Session, batches []*signerBatch) error {
	var parts []ClearAllocation
	var tried []*signerBatch
	for _, b := range batches {
		b.clear, b.fenced = false, false
		if b.chainNext != nil || b.cachedNext == nil {
			continue
		}
		b.reset()
		expected := *b.cachedNext
		a.assign(b, nil, nil, expected)
		parts = append(parts, ClearAllocation{Lease: b.lease, Txs: b.allocated, ExpectedNext: expected, Next: b.nextAfter})
		tried = append(tried, b)
	}
	if len(parts) == 0 {
		return nil
	}
	written, err := a.store.WriteClearAllocations(ctx, sess, parts)
	if err != nil {
		return err
	}
	for i, b := range tried {
		b.clear = written[i]
	}
	return nil
}

// newTx is op's new transaction at nonce.
func (a *Allocator) newTx(b *signerBatch, op *AllocationOp, nonce uint64, now time.Time) domain.ManagedTx {
	return domain.ManagedTx{
		ID:                uuid.Must(uuid.NewV7()),
		ChainID:           a.chainID,
		Signer:            b.signer,
		SignerHex:         b.key,
		RequestID:         op.Request.RequestID,
		Fingerprint:       op.Fingerprint,
		Nonce:             nonce,
		Intent:            op.Request.Intent,
		EffectiveGasLimit: op.GasLimit,
		State:             domain.StateAllocated,
		FencingToken:      b.lease.Token,
		CreatedAt:         now,
		UpdatedAt:         now,
	}
}

// reset clears what a previous run of the batch's part decided.
func (b *signerBatch) reset() {
	b.outcome = make([]opOutcome, len(b.ops))
	// A new slice, not the old one emptied: what was handed to the store (writeClear's parts)
	// keeps its rows when a signer turned away runs its full path.
	b.allocated = nil
	b.nextAfter, b.adopted = 0, 0
}

// adoptable loads the signer's recovered transactions that the batch's new creates may
// adopt (nil when the signer has none: the common case costs no query).
func (a *Allocator) adoptable(ctx context.Context, sess txmanager.Session, b *signerBatch, state CursorState, existing map[string]domain.ManagedTx) (*adoptionPool, error) {
	if !state.HasUnclaimed {
		return nil, nil
	}
	var keys [][32]byte
	for _, op := range b.ops {
		if id := op.Request.RequestID; id != "" {
			if _, known := existing[id]; !known {
				keys = append(keys, op.Request.RecoveryKey())
			}
		}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	candidates, err := a.store.FindUnclaimed(ctx, sess, b.signer, keys)
	if err != nil {
		return nil, err
	}
	return newAdoptionPool(candidates), nil
}

// adoptionPool hands a batch's recovered transactions to its creates, each at most once.
// Equal intents are interchangeable: any one-to-one assignment executes each intent once
// per request, so a create takes the lowest nonce still free.
type adoptionPool struct {
	free []domain.ManagedTx
	keys [][32]byte
}

func newAdoptionPool(candidates []domain.ManagedTx) *adoptionPool {
	p := &adoptionPool{free: candidates, keys: make([][32]byte, len(candidates))}
	for i, tx := range candidates {
		p.keys[i] = domain.CreateRequest{Signer: tx.Signer, Intent: tx.Intent}.RecoveryKey()
	}
	return p
}

// take removes and returns a free transaction with the recovery key and, when the create
// named one, the gas limit.
func (p *adoptionPool) take(key [32]byte, gasLimit uint64) (domain.ManagedTx, bool) {
	if p == nil {
		return domain.ManagedTx{}, false
	}
	for i, tx := range p.free {
		if p.keys[i] == key && (gasLimit == 0 || tx.EffectiveGasLimit == gasLimit) {
			p.free = append(p.free[:i], p.free[i+1:]...)
			p.keys = append(p.keys[:i], p.keys[i+1:]...)
			return tx, true
		}
	}
	return domain.ManagedTx{}, false
}

// existingByRequestID reads the signer's transactions of the batch's request ids, when the
// lease check counted some on record (a retry); a batch of new requests reads nothing more.
func (a *Allocator) existingByRequestID(ctx context.Context, sess txmanager.Session, signer common.Address, requestIDs []string, state CursorState) (map[string]domain.ManagedTx, error) {
	if state.KnownRequests == 0 {
		return nil, nil
	}
	return a.store.FindByRequestIDs(ctx, sess, signer, requestIDs)
}

// requestIDs are the request ids the batch's creates carry.
func (b *signerBatch) requestIDs() []string {
	var ids []string
	for _, op := range b.ops {
		if op.Request.RequestID != "" {
			ids = append(ids, op.Request.RequestID)
		}
	}
	return ids
}

func replayOutcome(tx domain.ManagedTx, fingerprint [32]byte, requestID string) opOutcome {
	if tx.Fingerprint != fingerprint {
		return opOutcome{tx: tx, err: fmt.Errorf("%w: requestId %q", domain.ErrIdempotencyConflict, requestID)}
	}
	return opOutcome{tx: tx}
}

// finish runs after commit: record the new cursor in the cache and answer the ops.
func (a *Allocator) finish(ctx context.Context, b *signerBatch) {
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

// quarantined fails the signer's ops when it is quarantined, or quarantines it now when the
// chain's nonce is above the cursor: the chain then holds transactions at nonces the
// database does not know, which after a failover to a standby that missed commits are
// likely this service's own. Allocating above them would hide that; only an operator who
// looked (admin API) releases the signer. A signer the database knows nothing of yet (no
// cursor) is a first use, not a loss, and is adopted.
func (a *Allocator) quarantined(ctx context.Context, sess txmanager.Session, b *signerBatch, state CursorState) (bool, error) {
	refuse := func(detail string) {
		err := fmt.Errorf("%w: %s; an operator lists the unknown nonces and releases it through the admin API", domain.ErrSignerQuarantined, detail)
		for i := range b.ops {
			b.outcome[i].err = err
		}
		a.cache.Evict(b.key)
	}
	if state.Quarantined && (a.nonce.RecoverByIntent || state.Releasing) {
		// The pipeline records the chain's unknown transactions and releases the signer
		// (by itself in recovery.mode adopt-by-intent, or because an operator asked): a
		// retry in a moment is served, and a lost request's retry is answered with its
		// transaction on chain.
		for i := range b.ops {
			b.outcome[i].err = &domain.UnavailableError{Reason: "signer recovering transactions the database lost from the chain", RetryAfter: time.Second,
				Err: errors.New("the chain holds nonces of this signer that the database does not know; they are being recorded")}
		}
		a.cache.Evict(b.key)
		if a.notify != nil {
			a.notify.NotifyQuarantined(b.key)
		}
		return true, nil
	}
	if state.Quarantined {
		refuse("the chain holds nonces of this signer that the database does not know")
		return true, nil
	}
	if a.nonce.AdoptUnknownChainNonces || state.Next == nil || b.chainNext == nil || *b.chainNext <= *state.Next {
		return false, nil
	}
	recorded, err := a.store.Quarantine(ctx, sess, b.lease, *state.Next, *b.chainNext)
	if err != nil || !recorded {
		// Not recorded: an operator released these nonces; allocate above them.
		return false, err
	}
	a.metrics.Quarantined(ctx)
	a.log.WithContext(ctx).Errorw("msg", "signer quarantined: the chain holds nonces the database does not know", "signer", b.key,
		"fencing_token", b.lease.Token, "db_next_nonce", *state.Next, "chain_nonce", *b.chainNext)
	if a.nonce.RecoverByIntent {
		state.Quarantined = true
		return a.quarantined(ctx, sess, b, state)
	}
	refuse(fmt.Sprintf("the chain's nonce is %d, the database knows nonces below %d only", *b.chainNext, *state.Next))
	return true, nil
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
func requestLinks(ops []*AllocationOp) []trace.Link {
	links := make([]trace.Link, 0, len(ops))
	for _, op := range ops {
		if op.requestSpan.IsValid() {
			links = append(links, trace.Link{SpanContext: op.requestSpan})
		}
	}
	return links
}
