package pipeline

import (
	"context"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// BroadcastOutcome is what a broadcast ended in, for one transaction.
type BroadcastOutcome struct {
	TxID uuid.UUID
	// TxHash is the hash of the bytes sent: the outcome is recorded only while they are the
	// transaction's current attempt.
	TxHash    common.Hash
	SubState  domain.SubState
	LastError string
	// Result is the metric label (submitted, known, nonce_too_low_ours, nonce_taken, ...).
	Result string
}

// AttemptStore is what every stage that signs or sends writes about attempts. Every write
// is fenced on the lease and yields *domain.FencedError when the lease no longer matches.
type AttemptStore interface {
	// RecordBroadcasts records each transaction's broadcast outcome.
	RecordBroadcasts(ctx context.Context, lease domain.Lease, outcomes []BroadcastOutcome) error
	// RecordAttempt stores a new attempt as its transaction's current one, with subState,
	// due for resubmission after resubmitAfter, and reports whether it did: a transaction
	// mined or final meanwhile takes no new attempt, and the attempt must not be sent.
	RecordAttempt(ctx context.Context, lease domain.Lease, attempt SignedAttempt, subState domain.SubState, resubmitAfter time.Duration) (bool, error)
	// RecordResolution is RecordAttempt for an attempt priced against the transaction's
	// attempt replaced (nil: none signed): it is stored only while replaced is still the
	// current one. A re-pricing that resubmission stored meanwhile outbids it; sent, it
	// would only be refused as underpriced.
	RecordResolution(ctx context.Context, lease domain.Lease, attempt SignedAttempt, replaced *common.Hash, subState domain.SubState, resubmitAfter time.Duration) (bool, error)
}
