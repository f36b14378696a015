package services

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// ApprovalStore keeps the intents sent for approval and their votes (migration 0021).
type ApprovalStore interface {
	Get(ctx context.Context, id uuid.UUID) (domain.Approval, error)
	List(ctx context.Context, f ApprovalFilter) ([]domain.Approval, error)
	// Lock reads and locks the approval until sess ends, and whether it is past its expiry.
	Lock(ctx context.Context, sess txmanager.Session, id uuid.UUID) (domain.Approval, bool, error)
	// AddVote records a vote; false when the approver had voted already.
	AddVote(ctx context.Context, sess txmanager.Session, id uuid.UUID, v domain.ApprovalVote) (bool, error)
	Approve(ctx context.Context, sess txmanager.Session, id uuid.UUID) error
	// Finish moves the approval from one of from to a final state with its completion
	// (sess nil: a statement of its own); false when it was in none of them.
	Finish(ctx context.Context, sess txmanager.Session, id uuid.UUID, state domain.ApprovalState, reason string, from ...domain.ApprovalState) (bool, error)
	// Expire ends up to limit open approvals past their expiry.
	Expire(ctx context.Context, limit int) ([]ExpiredApproval, error)
	// ApprovedToAdmit lists up to limit of the chain's approved intents after the position,
	// in order of expiry (the zero position: from the first).
	ApprovedToAdmit(ctx context.Context, chainID uint64, after ApprovalPosition, limit int) ([]domain.Approval, error)
	// Pending counts the approvals waiting for votes or admission, and the oldest one's age.
	Pending(ctx context.Context) (int64, time.Duration, error)
}

// ApprovalFilter selects approvals, newest first, before a cursor.
type ApprovalFilter struct {
	Before uuid.UUID
	State  domain.ApprovalState
	// Signers, when not nil, restricts them to those signers.
	Signers []string
	Limit   int
}

// ExpiredApproval is an approval the expiry pass ended.
type ExpiredApproval struct {
	ID     uuid.UUID
	Signer string
	Reason string
}

// ApprovalDesk is where intents sent for approval wait: approvers vote on them, they expire,
// and reads of a transaction that has no nonce yet find them (docs/policies.md#approvals).
type ApprovalDesk struct {
	tx      txmanager.Manager
	store   ApprovalStore
	audit   *AuditTrail
	node    string
	metrics *telemetry.Metrics
	log     *log.Helper

	mu sync.Mutex
	// next is where each chain's next admission pass reads from.
	next map[uint64]ApprovalPosition
}

// ApprovalPosition is a place in the order approved intents are admitted in: by expiry,
// then id.
type ApprovalPosition struct {
	ExpiresAt time.Time
	ID        uuid.UUID
}

// NewApprovalDesk wires the desk and its gauges (what waits, and the oldest's age).
func NewApprovalDesk(tx txmanager.Manager, store ApprovalStore, audit *AuditTrail, node NodeName, metrics *telemetry.Metrics, logger log.Logger) (*ApprovalDesk, error) {
	d := &ApprovalDesk{tx: tx, store: store, audit: audit, node: string(node), metrics: metrics, log: log.NewHelper(log.With(logger, "component", "approvals")),
		next: map[uint64]ApprovalPosition{}}
	if metrics == nil {
		return d, nil
	}
	pending := func(pick func(int64, time.Duration) float64) func(context.Context, func(float64, ...attribute.KeyValue)) {
		return func(ctx context.Context, record func(float64, ...attribute.KeyValue)) {
			ctx, cancel := context.WithTimeout(ctx, gaugeReadTimeout)
			defer cancel()
			if n, oldest, err := store.Pending(ctx); err == nil {
				record(pick(n, oldest))
			}
		}
	}
	if err := metrics.RegisterFloatGauge(telemetry.ApprovalsPending, "Intents waiting for approvers, or approved and waiting for their nonce.",
		pending(func(n int64, _ time.Duration) float64 { return float64(n) })); err != nil {
		return nil, err
	}
	err := metrics.RegisterFloatGauge(telemetry.ApprovalsOldestPending, "Age of the oldest intent waiting for approvers or for its nonce, in seconds (0 when none waits).",
		pending(func(_ int64, oldest time.Duration) float64 { return oldest.Seconds() }))
	return d, err
}

// Get reads one approval with its votes.
func (d *ApprovalDesk) Get(ctx context.Context, id string) (domain.Approval, error) {
	parsed, err := parseApprovalID(id)
	if err != nil {
		return domain.Approval{}, err
	}
	return d.store.Get(ctx, parsed)
}

// List reads approvals, newest first (at most 500 a call).
func (d *ApprovalDesk) List(ctx context.Context, state, before string, signers []string, limit int) ([]domain.Approval, error) {
	st, err := domain.ParseApprovalState(state)
	if err != nil {
		return nil, err
	}
	f := ApprovalFilter{State: st, Signers: signers, Limit: limit}
	if f.Limit <= 0 || f.Limit > 500 {
		f.Limit = 500
	}
	if before != "" {
		if f.Before, err = parseApprovalID(before); err != nil {
			return nil, &domain.ValidationError{Field: "before", Reason: "not an approval id"}
		}
	}
	return d.store.List(ctx, f)
}

// TxByID is the approval id read as a transaction before it has a nonce. An approval
// admitted as a transaction the chain held already (AdmittedTxID) answers with that id
// alone: the caller reads the transaction under it.
func (d *ApprovalDesk) TxByID(ctx context.Context, id string) (domain.ManagedTx, error) {
	a, err := d.Get(ctx, id)
	if err != nil {
		return domain.ManagedTx{}, err
	}
	if a.State == domain.ApprovalAdmitted && a.AdmittedTxID != uuid.Nil && a.AdmittedTxID != a.ID {
		return domain.ManagedTx{ID: a.AdmittedTxID}, nil
	}
	return a.AsTx(), nil
}

// Decide records one approver's vote: a rejection ends the approval at once (REJECTED, in
// the feed); the approval that reaches its count becomes APPROVED, and its signer's lease
// owner gives it a nonce. The vote, the state it changes and the audit record commit
// together.
func (d *ApprovalDesk) Decide(ctx context.Context, id string, approver domain.Principal, approve bool, note string) (domain.Approval, error) {
	parsed, err := parseApprovalID(id)
	if err != nil {
		return domain.Approval{}, err
	}
	if note, err = domain.ParseVoteNote(note); err != nil {
		return domain.Approval{}, err
	}
	err = d.tx.WithinTx(ctx, txmanager.DefaultOptions().WithTraceName("approval.decide"), func(ctx context.Context, sess txmanager.Session) error {
		a, expired, err := d.store.Lock(ctx, sess, parsed)
		if err != nil {
			return err
		}
		if err := a.CheckVoter(approver); err != nil {
			return err
		}
		if !a.State.Open() {
			return fmt.Errorf("%w: approval %s is %s", domain.ErrApprovalClosed, a.ID, a.State)
		}
		if expired {
			return fmt.Errorf("%w: approval %s expired at %s", domain.ErrApprovalClosed, a.ID, a.ExpiresAt.UTC().Format(time.RFC3339))
		}
		added, err := d.store.AddVote(ctx, sess, a.ID, domain.ApprovalVote{Approver: approver.ID, Approve: approve, Note: note, Node: d.node})
		if err != nil {
			return err
		}
		if !added {
			return fmt.Errorf("%w: %s has already voted on approval %s", domain.ErrAlreadyDecided, approver.ID, a.ID)
		}
		after := a.State
		switch {
		case !approve:
			reason := "rejected by " + approver.ID
			if note != "" {
				reason += ": " + note
			}
			if _, err := d.store.Finish(ctx, sess, a.ID, domain.ApprovalRejected, reason, domain.ApprovalAwaiting); err != nil {
				return err
			}
			after = domain.ApprovalRejected
		case a.Approvals()+1 >= a.Required:
			if err := d.store.Approve(ctx, sess, a.ID); err != nil {
				return err
			}
			after = domain.ApprovalApproved
		}
		return d.audit.Record(ctx, sess, approver.ID, domain.AuditApprovalVote, "approval "+a.ID.String(),
			map[string]any{"state": a.State, "approvals": a.Approvals(), "required": a.Required},
			map[string]any{"state": after, "approve": approve, "note": note, "signer": a.Signer.Hex(), "requester": a.Requester})
	})
	if err != nil {
		return domain.Approval{}, err
	}
	if d.metrics != nil {
		d.metrics.ApprovalVote(ctx, approve)
	}
	a, err := d.store.Get(ctx, parsed)
	if err != nil {
		return domain.Approval{}, err
	}
	if d.metrics != nil && a.State == domain.ApprovalRejected {
		d.metrics.ApprovalEnded(ctx, string(a.State), 1)
	}
	d.log.Infow("msg", "approval vote", "approval", a.ID.String(), "approver", approver.ID, "approve", approve, "state", string(a.State),
		"approvals", a.Approvals(), "required", a.Required)
	return a, nil
}

// expiryBatch bounds one expiry pass.
const expiryBatch = 500

// ExpirePass ends the approvals past their expiry (EXPIRED, with their completions in the
// feed). Any node runs it; each approval ends once.
func (d *ApprovalDesk) ExpirePass(ctx context.Context) error {
	expired, err := d.store.Expire(ctx, expiryBatch)
	if err != nil {
		return err
	}
	for _, e := range expired {
		d.log.Infow("msg", "approval expired", "approval", e.ID.String(), "signer", e.Signer, "reason", e.Reason)
		d.audit.RecordAfter(ctx, "service", domain.AuditApprovalEnded, "approval "+e.ID.String(), nil, map[string]any{"state": domain.ApprovalExpired, "reason": e.Reason})
	}
	if len(expired) > 0 && d.metrics != nil {
		d.metrics.ApprovalEnded(ctx, string(domain.ApprovalExpired), len(expired))
	}
	return nil
}

// admissionBatch bounds how many approved intents one pass admits per chain.
const admissionBatch = 100

// AdmitPass gives the chain's approved intents their nonces through the create path, as
// creates of their requesters: on the signer's lease owner (elsewhere the create path
// answers NOT_LEADER and the owner's pass admits it), under every policy but the approval
// rule. What may pass later (no endpoint, funds, a pause, another owner) is tried again on
// the next pass until the approval expires; what never will (a window full, the signer
// retired) ends the approval REFUSED with the reason.
func (d *ApprovalDesk) AdmitPass(ctx context.Context, chainID uint64, create *CreateTxUseCase) error {
	d.mu.Lock()
	after := d.next[chainID]
	d.mu.Unlock()
	approved, err := d.store.ApprovedToAdmit(ctx, chainID, after, admissionBatch)
	if err != nil {
		return err
	}
	// A full page: the next pass reads on after it, so intents held back for now do not
	// keep the later ones waiting; a short one: the next pass starts again from the first.
	next := ApprovalPosition{}
	if len(approved) == admissionBatch {
		last := approved[len(approved)-1]
		next = ApprovalPosition{ExpiresAt: last.ExpiresAt, ID: last.ID}
	}
	d.mu.Lock()
	d.next[chainID] = next
	d.mu.Unlock()
	for _, a := range approved {
		res, err := create.AdmitApproved(ctx, a)
		switch {
		case err == nil && res.Tx.ID == a.ID && res.Tx.State == domain.StateAwaitingApproval:
			// Answered with the approval itself: nothing was admitted this pass.
			d.log.Debugw("msg", "approved intent not admitted yet", "approval", a.ID.String(), "state", string(res.Tx.State))
		case err == nil && res.Tx.ID == a.ID:
			d.log.Infow("msg", "approved intent admitted", "approval", a.ID.String(), "signer", a.Signer.Hex(), "nonce", res.Tx.Nonce)
			if d.metrics != nil {
				d.metrics.ApprovalEnded(ctx, string(domain.ApprovalAdmitted), 1)
			}
		case err == nil && res.Tx.RecoveredAt != nil && res.Tx.RequestID == a.RequestID:
			// The database was restored to before this admission: the transaction it sent
			// is on chain, recovered, and the admission adopted it rather than send it again.
			d.log.Warnw("msg", "approved intent admitted as the transaction the chain holds already (recovered after the database lost it)",
				"approval", a.ID.String(), "signer", a.Signer.Hex(), "tx", res.Tx.ID.String(), "nonce", res.Tx.Nonce)
			if d.metrics != nil {
				d.metrics.ApprovalEnded(ctx, string(domain.ApprovalAdmitted), 1)
			}
		case err == nil:
			d.refuse(ctx, a, fmt.Sprintf("its request id %q names transaction %s already", a.RequestID, res.Tx.ID))
		case admissionMayPassLater(err):
			d.log.Debugw("msg", "approved intent not admitted yet", "approval", a.ID.String(), "error", err.Error())
		default:
			d.refuse(ctx, a, err.Error())
		}
	}
	return nil
}

func (d *ApprovalDesk) refuse(ctx context.Context, a domain.Approval, reason string) {
	ended, err := d.store.Finish(ctx, nil, a.ID, domain.ApprovalRefused, reason, domain.ApprovalApproved)
	if err != nil || !ended {
		return
	}
	d.log.Warnw("msg", "approved intent refused", "approval", a.ID.String(), "signer", a.Signer.Hex(), "reason", reason)
	d.audit.RecordAfter(ctx, "service", domain.AuditApprovalEnded, "approval "+a.ID.String(), nil, map[string]any{"state": domain.ApprovalRefused, "reason": reason})
	if d.metrics != nil {
		d.metrics.ApprovalEnded(ctx, string(domain.ApprovalRefused), 1)
	}
}

// admissionMayPassLater: the create path's refusal depends on the moment (the lease, the
// chain, the funds, a pause, an approval another pass just admitted) or on the node that
// ran it (every node runs the pass; one that does not hold the signer's key yet refuses it
// as unknown, where its owner would not), not on the intent. A policy's minimum remaining
// balance is funds too: a refill lets it pass.
func admissionMayPassLater(err error) bool {
	for _, transient := range []error{domain.ErrNotLeader, domain.ErrFenced, domain.ErrUnavailable, domain.ErrSignerUnavailable, domain.ErrSignerPaused,
		domain.ErrSignerQuarantined, domain.ErrInsufficientFunds, domain.ErrOutcomeUnknown, domain.ErrApprovalClosed, domain.ErrUnknownSigner,
		context.DeadlineExceeded, context.Canceled} {
		if errors.Is(err, transient) {
			return true
		}
	}
	var denied *domain.PolicyDeniedError
	return errors.As(err, &denied) && denied.Rule == domain.PolicyRuleMinBalance
}

func parseApprovalID(id string) (uuid.UUID, error) {
	parsed, err := uuid.Parse(id)
	if err != nil {
		return uuid.Nil, &domain.ValidationError{Field: "approvalId", Reason: "not a UUID"}
	}
	return parsed, nil
}
