package services

import (
	"context"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// LeaseGrant is the database's answer to acquireOrRenew.
type LeaseGrant struct {
	Signer    string
	Owner     string
	Token     uint64
	ExpiresAt time.Time
	DBNow     time.Time
	// Acquired is true when the lease is now ours (new, renewed or taken over).
	Acquired bool
}

// LeaseStore persists signer leases.
type LeaseStore interface {
	// AcquireOrRenew atomically renews our lease, takes an expired one over, or reports the
	// current owner (Acquired=false).
	AcquireOrRenew(ctx context.Context, signer, node string, duration, skew time.Duration) (LeaseGrant, error)
	// Release ends our lease so a peer can take over without waiting for expiry.
	Release(ctx context.Context, lease domain.Lease) error
	// Renew extends, in one statement, every lease of node among signers that is still its
	// own and unexpired, and returns those; a signer missing from the answer is lost.
	Renew(ctx context.Context, node string, signers []string, duration time.Duration) ([]LeaseGrant, error)
}

// AllocationStore is the writer batch's view of the database. Every method runs inside the
// batch's transaction; every write is fenced and returns a *domain.FencedError when the
// lease no longer matches.
type AllocationStore interface {
	// LockLeaseAndReadCursor proves the lease is still held and locks it FOR KEY SHARE until
	// commit; it returns the cursor (nil when the signer has none yet), whether the signer
	// is quarantined, and how many of requestIDs the signer already has on record. When the
	// lease is gone because the signer is retiring or retired, it reports Retired, not
	// FENCED: a retirement lets the signer's lease go.
	LockLeaseAndReadCursor(ctx context.Context, sess txmanager.Session, lease domain.Lease, requestIDs []string) (CursorState, error)
	// Quarantine records (fenced, in the batch's transaction) that the chain holds nonces
	// from dbNext up to chainNext the database does not know.
	// It reports false when an operator already released those nonces.
	Quarantine(ctx context.Context, sess txmanager.Session, lease domain.Lease, dbNext, chainNext uint64) (bool, error)
	// FindByRequestIDs returns the signer's transactions carrying any of the request ids,
	// and, for a request id without one, its approval request as the transaction it stands
	// for (domain.Approval.AsTx).
	FindByRequestIDs(ctx context.Context, sess txmanager.Session, signer common.Address, requestIDs []string) (map[string]domain.ManagedTx, error)
	// WriteAllocation inserts the signer's newly allocated transactions and advances its
	// cursor to next, both or neither.
	WriteAllocation(ctx context.Context, sess txmanager.Session, lease domain.Lease, txs []domain.ManagedTx, next uint64) error
	// WriteClearAllocations writes, in one statement, each part's txs, numbered from its
	// ExpectedNext, and advances its signer's cursor to its Next, but only for the parts whose
	// signer needs nothing of the full path (the lease held, the cursor at ExpectedNext, the
	// signer active and not quarantined, nothing to adopt, none of the parts' request ids on
	// record). It reports, part by part, which were written; the others have had nothing
	// written.
	WriteClearAllocations(ctx context.Context, sess txmanager.Session, parts []ClearAllocation) ([]bool, error)
	// FindUnclaimed returns the signer's recovered transactions still adoptable whose
	// recovery key is among keys, lowest nonce first, locked until the batch commits.
	FindUnclaimed(ctx context.Context, sess txmanager.Session, signer common.Address, keys [][32]byte) ([]domain.ManagedTx, error)
	// ClaimUnclaimed gives each recovered transaction its adopter's request id and
	// fingerprint (fenced), writing the held-back completion of those already final.
	ClaimUnclaimed(ctx context.Context, sess txmanager.Session, lease domain.Lease, adoptions []Adoption) error
	// PoliciesForAdmission reads, and locks until the batch commits, the spending policies of
	// the signer and of the credentials.
	PoliciesForAdmission(ctx context.Context, sess txmanager.Session, signer string, credentials []string) ([]domain.VersionedPolicy, error)
	// WindowTotals answers what each window already counts.
	WindowTotals(ctx context.Context, sess txmanager.Session, keys []WindowKey) (map[WindowKey]domain.WindowTotals, error)
	// AddSpend counts what the batch admitted under windowed policies.
	AddSpend(ctx context.Context, sess txmanager.Session, spends []PolicySpend) error
	// HoldFirstPolicies holds a scope's first policy back until the batch commits; a batch
	// takes it before it reads any policy, so a policy a scope did not have binds every
	// create committed after it.
	HoldFirstPolicies(ctx context.Context, sess txmanager.Session) error
	// LockPolicies locks, in one statement and one order, the policies of every signer and
	// credential of a batch whose parts take the full path one after another: each part's
	// PoliciesForAdmission then finds its rows locked already, so two nodes' batches never
	// lock two scopes in opposite orders.
	LockPolicies(ctx context.Context, sess txmanager.Session, signers, credentials []string) error
	// RequestApproval records an approval request, or returns the one already recorded
	// under its signer and request id.
	RequestApproval(ctx context.Context, sess txmanager.Session, approval domain.Approval) (domain.Approval, error)
	// LockApproved returns which of ids are APPROVED and unexpired, with the rule each was
	// approved under, locked until commit.
	LockApproved(ctx context.Context, sess txmanager.Session, ids []uuid.UUID) ([]ApprovedGrant, error)
	// AdmitApprovals marks ADMITTED the approvals whose transactions the batch wrote or
	// adopted, each with the transaction it was admitted as.
	AdmitApprovals(ctx context.Context, sess txmanager.Session, admitted []AdmittedApproval) error
	// AppendEvent records a service event in the batch's transaction.
	AppendEvent(ctx context.Context, sess txmanager.Session, e ServiceEvent) error
}

// AdmittedApproval is an approval a writer batch admitted and the transaction it became: one
// with the approval's id, or a recovered one the chain held already (the database lost it)
// that the admission adopted instead of sending the intent again.
type AdmittedApproval struct {
	ApprovalID uuid.UUID
	TxID       uuid.UUID
}

// ClearAllocation is one signer's part of a batch written by WriteClearAllocations: its new
// transactions, numbered from the cached cursor ExpectedNext, and the cursor after them.
type ClearAllocation struct {
	Lease        domain.Lease
	Txs          []domain.ManagedTx
	ExpectedNext uint64
	Next         uint64
	// Credentials are the distinct credentials the part's creates came with: a policy of
	// one of them sends the part to the full path.
	Credentials []string
}

// CursorState is a signer's allocation state read under its lease.
type CursorState struct {
	Next        *uint64
	Quarantined bool
	// Releasing: an operator released the quarantined signer; it serves once its recovery
	// has recorded the unknown transactions.
	Releasing bool
	// Retired: the signer roster has it retiring or retired (read under a row lock a
	// retirement waits for), so the batch allocates nothing for it.
	Retired bool
	// Paused: an operator paused the signer (read under the same lock a pause waits for).
	Paused bool
	// HasUnclaimed: the signer has recovered transactions a retried create may adopt.
	HasUnclaimed bool
	// KnownRequests is how many distinct request ids of the batch the signer already has
	// on record, as transactions or approval requests: the retries FindByRequestIDs then
	// reads.
	KnownRequests int
}

// Adoption is a create adopting a recovered transaction.
type Adoption struct {
	TxID        uuid.UUID
	RequestID   string
	Fingerprint [32]byte
}

// TxReader reads managed transactions outside any transaction.
type TxReader interface {
	GetByID(ctx context.Context, id uuid.UUID) (domain.ManagedTx, error)
	GetByRequestID(ctx context.Context, signer common.Address, requestID string) (domain.ManagedTx, error)
	// HasAdoptable reports whether a transaction recovered after a database loss, with this
	// recovery key, is still waiting for its request's retry.
	HasAdoptable(ctx context.Context, signer common.Address, recoveryKey [32]byte) (bool, error)
}

// SignerDirectory says which signers this service holds keys for and which of them take
// new transactions.
type SignerDirectory interface {
	// Accepts is nil when signer may be given a new transaction; otherwise an error
	// matching domain.ErrUnknownSigner (no key held) or domain.ErrSignerRetired (retiring or
	// retired in the signer roster).
	Accepts(signer common.Address) error
	// Addresses lists every managed signer.
	Addresses() []common.Address
}

// AllocationQueue takes a create to the writer and answers it once its batch has
// committed: the transaction (created, or a replay of the one on record), or why not.
// resolved, when not nil, is told the writer's outcome exactly once, when there is one:
// also after the caller stopped waiting (its answer then is ErrOutcomeUnknown, and the
// writer may still write the row).
type AllocationQueue interface {
	Allocate(ctx context.Context, req domain.CreateRequest, gasLimit uint64, resolved func(tx domain.ManagedTx, created bool, err error)) (tx domain.ManagedTx, created bool, err error)
}

// Clock is time, injectable for tests.
type Clock interface{ Now() time.Time }

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// ApprovedGrant is an approved intent as the writer admits it: the policy version that sent
// it for approval, and the approvers it had to have.
type ApprovedGrant struct {
	ID            uuid.UUID
	PolicyScope   string
	PolicyVersion int64
	Role          string
	Required      int
}
