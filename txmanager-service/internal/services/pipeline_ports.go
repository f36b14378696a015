package services

import (
	"context"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// AttemptKind says what a signed attempt is for.
type AttemptKind string

const (
	// AttemptOriginal carries the client's intent.
	AttemptOriginal AttemptKind = "ORIGINAL"
	// AttemptReplace carries the same intent with bumped fees.
	AttemptReplace AttemptKind = "REPLACE"
	// AttemptCancel is a 0-value self-transfer that consumes the nonce instead.
	AttemptCancel AttemptKind = "CANCEL"
	// AttemptPlaceholder is a 0-value self-transfer that fills the nonce.
	AttemptPlaceholder AttemptKind = "PLACEHOLDER"
)

// ExecutesIntent reports whether a mined attempt of this kind ran the client's intent.
func (k AttemptKind) ExecutesIntent() bool {
	return k == AttemptOriginal || k == AttemptReplace || k == ""
}

// SignedAttempt is one signed raw transaction for a managed transaction's nonce.
type SignedAttempt struct {
	TxID     uuid.UUID
	Hash     common.Hash
	Nonce    uint64
	Kind     AttemptKind
	MaxFee   *big.Int
	MaxTip   *big.Int
	GasLimit uint64
	Raw      []byte
}

// BroadcastOutcome is what a broadcast ended in, for one transaction.
type BroadcastOutcome struct {
	TxID      uuid.UUID
	SubState  string
	LastError string
	// Result is the metric label (submitted, known, nonce_too_low_ours, nonce_taken, ...).
	Result string
}

// AttemptRef names an attempt to look a receipt up for.
type AttemptRef struct {
	Hash common.Hash
	Kind AttemptKind
}

// TrackedTx is broadcast and not yet mined.
type TrackedTx struct {
	TxID     uuid.UUID
	Signer   string
	Nonce    uint64
	Attempts []AttemptRef
}

// FoundReceipt is a receipt for one attempt of a tracked transaction.
type FoundReceipt struct {
	TxID    uuid.UUID
	Signer  string
	Kind    AttemptKind
	Receipt Receipt
}

// MinedTx has a receipt and is not final yet.
type MinedTx struct {
	TxID        uuid.UUID
	Signer      string
	Nonce       uint64
	BlockNumber uint64
	BlockHash   common.Hash
	Status      uint64
	Kind        AttemptKind
}

// Finalization is a mined transaction reaching its final state.
type Finalization struct {
	Tx       MinedTx
	State    domain.State
	SubState string
}

// DueResubmit is a transaction whose current attempt is due to be broadcast again.
type DueResubmit struct {
	TxID uuid.UUID
	// Current is the current attempt: its hash, signed bytes, kind and fees.
	Current        common.Hash
	Raw            []byte
	Kind           AttemptKind
	MaxFee, MaxTip *big.Int
	// IntentMaxFee and IntentMaxTip are the fees the client named (nil when it named none):
	// a re-priced attempt never goes above them.
	IntentMaxFee, IntentMaxTip *big.Int
	// AllHashes are every attempt's hashes: any of them may be what the node has.
	AllHashes []common.Hash
}

// Replacement is a re-priced attempt that takes over from the attempt Replaced.
type Replacement struct {
	Replaced common.Hash
	Attempt  SignedAttempt
}

// HeadOfLineTx is a signer's lowest unmined nonce.
type HeadOfLineTx struct {
	TxID           uuid.UUID
	Signer         string
	Nonce          uint64
	State          domain.State
	SubState       string
	TxHash         *common.Hash
	SubmitAttempts int
	LastError      string
	CreatedAt      time.Time
	Intent         domain.Intent
	GasLimit       uint64
	// Fees of the current attempt (nil before the first signing).
	MaxFee, MaxTip *big.Int
	PendingDepth   int
	// Since is when it started waiting: creation, or the last resolution claimed for it.
	Since time.Time
}

// StuckClaim claims a stuck transaction for one resolution action.
type StuckClaim struct {
	TxID     uuid.UUID
	Action   domain.ResolutionAction
	NewState domain.State
	SubState string
	Reason   string
}

// OpenSigner is a signer with unfinished transactions and its lease holder, if any.
type OpenSigner struct {
	Signer    string
	Owner     string
	LeaseLive bool
}

// PipelineStore is the chain pipeline's view of the database. Every write is fenced on the
// lease and yields *domain.FencedError when the lease no longer matches.
type PipelineStore interface {
	ListAllocated(ctx context.Context, signer string, limit int) ([]domain.ManagedTx, error)
	MarkSigned(ctx context.Context, lease domain.Lease, attempts []SignedAttempt, resubmitAfter time.Duration) error
	RecordBroadcasts(ctx context.Context, lease domain.Lease, outcomes []BroadcastOutcome) error

	ListAwaitingReceipt(ctx context.Context, signers []string) ([]TrackedTx, error)
	RecordReceipts(ctx context.Context, lease domain.Lease, found []FoundReceipt) (int, error)

	ListMined(ctx context.Context, signers []string) ([]MinedTx, error)
	RevertReorged(ctx context.Context, lease domain.Lease, txs []MinedTx) (int, error)
	Finalize(ctx context.Context, lease domain.Lease, finals []Finalization) (int, error)

	ListResubmitDue(ctx context.Context, signer string, limit int) ([]DueResubmit, error)
	// ClaimResubmits claims those of txIDs still due (fenced) and returns them.
	ClaimResubmits(ctx context.Context, lease domain.Lease, txIDs []uuid.UUID, resubmitAfter time.Duration) ([]uuid.UUID, error)
	// LowestOpenNonce is the signer's lowest nonce not yet final, -1 when none is open.
	LowestOpenNonce(ctx context.Context, signer string) (int64, error)
	// InsertPlaceholders stores placeholder transactions (fenced) at free nonces and returns
	// how many it created.
	InsertPlaceholders(ctx context.Context, lease domain.Lease, txs []domain.ManagedTx) (int, error)
	// RecordReplacements stores re-priced attempts (fenced) as their transactions' current
	// ones and returns the transactions whose current attempt they became.
	RecordReplacements(ctx context.Context, lease domain.Lease, replacements []Replacement) ([]uuid.UUID, error)

	// HeadOfLine is the signer's lowest unmined transaction (nil when none).
	HeadOfLine(ctx context.Context, signer string) (*HeadOfLineTx, error)
	// Resolvable loads one unmined transaction in the same shape (nil when it is mined,
	// final or unknown).
	Resolvable(ctx context.Context, txID uuid.UUID) (*HeadOfLineTx, error)
	ClaimStuckResolution(ctx context.Context, lease domain.Lease, claim StuckClaim) (bool, error)
	RecordAttempt(ctx context.Context, lease domain.Lease, attempt SignedAttempt, subState string, resubmitAfter time.Duration) error

	ListOpenSigners(ctx context.Context) ([]OpenSigner, error)
	// OldestPendingAges is, per signer, the age in seconds of its oldest unfinished tx.
	OldestPendingAges(ctx context.Context, signers []string) (map[string]float64, error)
}
