package writer

import (
	"context"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// assign answers each op of the batch, on a reset batch: a replay of a transaction on
// record (existing) or of an earlier op of the batch with the same request id, an adoption
// of a recovered transaction (pool), or a new transaction at the next nonce from next. It
// records the new ones and the nonce after them on the batch and returns the adoptions.
// A gate (nil: no policy binds the part) refuses the new ones its policies deny.
func (a *Allocator) assign(b *signerBatch, existing map[string]domain.ManagedTx, pool *adoptionPool, gate *policyGate, next uint64) []services.Adoption {
	var adoptions []services.Adoption
	// PostgreSQL keeps microseconds: round here so the answer equals what a read returns.
	now := a.clock.Now().UTC().Truncate(time.Microsecond)
	firstInBatch := map[string]int{}
	for i, op := range b.ops {
		id := op.Request.RequestID
		if id != "" {
			// An approved intent's own admission finds its approval request under its request
			// id: that is what it admits, not a replay.
			if tx, ok := existing[id]; ok && !(tx.State == domain.StateAwaitingApproval && tx.ID == op.Request.Admission.ApprovalID) {
				b.outcome[i] = opOutcome{tx: tx, err: domain.ReplayOf(tx, op.Fingerprint, id)}
				continue
			}
			if j, ok := firstInBatch[id]; ok {
				if b.outcome[j].tx.ID == uuid.Nil {
					// The first was refused (a policy, a pause): so is its repeat.
					b.outcome[i] = opOutcome{err: b.outcome[j].err}
					continue
				}
				// Same requestId twice in one batch: the later op answers like a replay of
				// the first and consumes no nonce.
				b.outcome[i] = opOutcome{tx: b.outcome[j].tx, err: domain.ReplayOf(b.outcome[j].tx, op.Fingerprint, id)}
				continue
			}
			firstInBatch[id] = i
		}
		// A lost request's retry is answered with its transaction on chain. So is an approved
		// intent's admission (with a request id or without: the approval names what it
		// repeats) after a database restored to before it lost the transaction, while its
		// approval is still open (else the gate refuses it below).
		if (id != "" || op.Request.Admission.ApprovalID != uuid.Nil) && gate.approvalOpen(op) {
			if tx, ok := pool.take(op.Request.RecoveryKey(), op.Request.Intent.GasLimit); ok {
				tx.RequestID, tx.Fingerprint, tx.UnclaimedUntil = id, op.Fingerprint, nil
				b.outcome[i] = opOutcome{tx: tx, adopted: true}
				adoptions = append(adoptions, services.Adoption{TxID: tx.ID, RequestID: id, Fingerprint: op.Fingerprint})
				gate.countAdopted(op)
				continue
			}
		}
		if refusal := op.Request.Admission.AdoptOnly; refusal != nil {
			// It passed no check for a new transaction: none was left to adopt.
			b.outcome[i] = opOutcome{err: refusal}
			continue
		}
		need, err := gate.admit(op)
		if err != nil {
			b.outcome[i] = opOutcome{err: err}
			continue
		}
		if need != nil {
			approval := a.newApproval(b, op, need, now)
			b.outcome[i] = opOutcome{tx: approval.AsTx(), created: true}
			b.approvals = append(b.approvals, requestedApproval{op: i, approval: approval})
			continue
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
	var parts []services.ClearAllocation
	var tried []*signerBatch
	for _, b := range batches {
		b.clear, b.fenced = false, false
		// A create admitting an approved intent takes the full path, which claims its
		// approval in the allocation's transaction.
		if b.chainNext != nil || b.cachedNext == nil || len(b.approvalIDs()) > 0 {
			continue
		}
		b.reset()
		expected := *b.cachedNext
		a.assign(b, nil, nil, nil, expected)
		if len(b.allocated) == 0 {
			// Nothing new to number (a lost request's retry that may only adopt, refused
			// here without the pool): the full path looks for what it may adopt.
			continue
		}
		parts = append(parts, services.ClearAllocation{Lease: b.lease, Txs: b.allocated, ExpectedNext: expected, Next: b.nextAfter, Credentials: b.credentials()})
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
func (a *Allocator) newTx(b *signerBatch, op *Op, nonce uint64, now time.Time) domain.ManagedTx {
	id := op.Request.Admission.ApprovalID
	if id == uuid.Nil {
		id = uuid.Must(uuid.NewV7())
	}
	return domain.ManagedTx{
		ID:                id,
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
	b.approvals = nil
}

// adoptable loads the signer's recovered transactions that the batch's new creates may
// adopt (nil when the signer has none: the common case costs no query).
func (a *Allocator) adoptable(ctx context.Context, sess txmanager.Session, b *signerBatch, state services.CursorState, existing map[string]domain.ManagedTx) (*adoptionPool, error) {
	if !state.HasUnclaimed {
		return nil, nil
	}
	var keys [][32]byte
	for _, op := range b.ops {
		id, approval := op.Request.RequestID, op.Request.Admission.ApprovalID
		if id == "" && approval == uuid.Nil {
			continue // nothing names what it would repeat
		}
		// Unknown, or known as the approval this op admits.
		if tx, known := existing[id]; id == "" || !known || (tx.State == domain.StateAwaitingApproval && tx.ID == approval) {
			keys = append(keys, op.Request.RecoveryKey())
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
func (a *Allocator) existingByRequestID(ctx context.Context, sess txmanager.Session, signer common.Address, requestIDs []string, state services.CursorState) (map[string]domain.ManagedTx, error) {
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
