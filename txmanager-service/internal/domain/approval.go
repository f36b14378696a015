package domain

import (
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/google/uuid"
)

// The states an intent sent for approval shows as a transaction until it is admitted (it
// then is the transaction its id names). The last three are final.
const (
	StateAwaitingApproval State = "AWAITING_APPROVAL"
	StateExpired          State = "EXPIRED"
	StateRejected         State = "REJECTED"
	StateRefused          State = "REFUSED"
)

// ApprovalState is where an approval is: waiting for votes, approved and waiting for its
// signer's writer, admitted (it has a nonce), or final without one.
type ApprovalState string

const (
	ApprovalAwaiting ApprovalState = "AWAITING_APPROVAL"
	ApprovalApproved ApprovalState = "APPROVED"
	ApprovalAdmitted ApprovalState = "ADMITTED"
	ApprovalExpired  ApprovalState = "EXPIRED"
	ApprovalRejected ApprovalState = "REJECTED"
	ApprovalRefused  ApprovalState = "REFUSED"
)

// ParseApprovalState validates a state filter ("" for any).
func ParseApprovalState(s string) (ApprovalState, error) {
	switch st := ApprovalState(s); st {
	case "", ApprovalAwaiting, ApprovalApproved, ApprovalAdmitted, ApprovalExpired, ApprovalRejected, ApprovalRefused:
		return st, nil
	}
	return "", invalid("state", "%q is not AWAITING_APPROVAL, APPROVED, ADMITTED, EXPIRED, REJECTED or REFUSED", s)
}

// Open reports whether votes may still change the approval.
func (s ApprovalState) Open() bool { return s == ApprovalAwaiting }

var (
	// ErrApprovalForbidden: the caller may not decide this approval (no such role, not
	// granted the signer, or its own request).
	ErrApprovalForbidden = errors.New("approval forbidden")
	// ErrApprovalClosed: the approval no longer takes votes (approved, admitted, expired,
	// rejected or refused).
	ErrApprovalClosed = errors.New("approval closed")
	// ErrAlreadyDecided: the caller has already voted on this approval.
	ErrAlreadyDecided = errors.New("already decided")
)

// Approval is an intent a policy sent for approval, with the votes it has.
type Approval struct {
	// ID becomes the transaction's id once it is admitted.
	ID          uuid.UUID
	ChainID     uint64
	Signer      common.Address
	RequestID   string
	Fingerprint [32]byte
	// Requester is the credential that asked for the intent; it never approves it.
	Requester string
	// Intent is what the create carried (its gas limit as given, 0 when estimated).
	Intent Intent
	// PolicyScope and PolicyVersion name the policy that sent it here; Reason why.
	PolicyScope   string
	PolicyVersion int64
	Reason        string
	// Role is who may approve; Required how many distinct approvers it needs.
	Role        string
	Required    int
	State       ApprovalState
	FinalReason string
	CreatedAt   time.Time
	ExpiresAt   time.Time
	DecidedAt   *time.Time
	Votes       []ApprovalVote
	// AdmittedTxID is the transaction an ADMITTED approval became: ID, or a transaction the
	// chain held already that its admission adopted (a database restored to before the
	// admission lost it, and it was recovered from the chain).
	AdmittedTxID uuid.UUID
}

// ApprovalVote is one approver's decision.
type ApprovalVote struct {
	Approver string
	Approve  bool
	Note     string
	Node     string
	At       time.Time
}

// Approvals counts the votes in favour.
func (a Approval) Approvals() int {
	n := 0
	for _, v := range a.Votes {
		if v.Approve {
			n++
		}
	}
	return n
}

// AsTx is the approval as a transaction read shows it before it has a nonce: the state
// AWAITING_APPROVAL (sub-state APPROVED once approved), or its final state, with why in
// last_error.
func (a Approval) AsTx() ManagedTx {
	tx := ManagedTx{ID: a.ID, ChainID: a.ChainID, Signer: a.Signer, RequestID: a.RequestID, Fingerprint: a.Fingerprint,
		Intent: a.Intent, EffectiveGasLimit: a.Intent.GasLimit, CreatedAt: a.CreatedAt, UpdatedAt: a.CreatedAt}
	if a.DecidedAt != nil {
		tx.UpdatedAt = *a.DecidedAt
	}
	switch a.State {
	case ApprovalExpired:
		tx.State = StateExpired
	case ApprovalRejected:
		tx.State = StateRejected
	case ApprovalRefused:
		tx.State = StateRefused
	case ApprovalApproved, ApprovalAdmitted:
		tx.State, tx.SubState = StateAwaitingApproval, SubState(ApprovalApproved)
	default:
		tx.State = StateAwaitingApproval
	}
	if a.State == ApprovalAwaiting || a.State == ApprovalApproved || a.State == ApprovalAdmitted {
		tx.LastError = fmt.Sprintf("waits for %d of %d approvals (role %s) until %s: %s (policy of %s, version %d)",
			a.Approvals(), a.Required, a.Role, a.ExpiresAt.UTC().Format(time.RFC3339), a.Reason, a.PolicyScope, a.PolicyVersion)
	} else {
		tx.LastError = a.FinalReason
	}
	return tx
}

// Input is the create the approval runs once approved: the intent as the caller sent it,
// so its fingerprint is the one the approval was asked with.
func (a Approval) Input() CreateInput {
	in := CreateInput{Signer: a.Signer.Hex(), RequestID: a.RequestID, GasLimit: a.Intent.GasLimit}
	if a.Intent.To != nil {
		in.To = a.Intent.To.Hex()
	}
	if a.Intent.Value != nil {
		in.Value = a.Intent.Value.String()
	}
	if len(a.Intent.Data) > 0 {
		in.Data = hexutil.Encode(a.Intent.Data)
	}
	in.MaxFeePerGas = decimalOrEmpty(a.Intent.MaxFeePerGas)
	in.MaxPriorityFeePerGas = decimalOrEmpty(a.Intent.MaxPriorityFeePerGas)
	return in
}

func decimalOrEmpty(v *big.Int) string {
	if v == nil {
		return ""
	}
	return v.String()
}

// ApprovalDecision is one vote being cast.
type ApprovalDecision struct {
	ID       uuid.UUID
	Approver Principal
	Approve  bool
	Note     string
}

// maxVoteNote bounds a vote's note.
const maxVoteNote = 500

// CheckVoter says whether p may vote on a: it holds a's role, is granted a's signer, and did
// not ask for the intent.
func (a Approval) CheckVoter(p Principal) error {
	if !p.Roles[a.Role] {
		return fmt.Errorf("%w: %s does not hold the role %s this approval needs", ErrApprovalForbidden, p.ID, a.Role)
	}
	if !p.CanUse(a.Signer) {
		return fmt.Errorf("%w: %s is not granted signer %s", ErrApprovalForbidden, p.ID, a.Signer.Hex())
	}
	if p.ID == a.Requester {
		return fmt.Errorf("%w: %s asked for this intent and cannot approve its own request", ErrApprovalForbidden, p.ID)
	}
	return nil
}

// ParseVoteNote validates a vote's note.
func ParseVoteNote(note string) (string, error) {
	if len(note) > maxVoteNote {
		return "", invalid("note", "%d bytes, at most %d", len(note), maxVoteNote)
	}
	return note, nil
}
