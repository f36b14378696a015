// Package reconcile is the pipeline stage that makes the database and the chain agree
// where they disagree about a signer's nonces: a chain ahead of every nonce the database
// knows (the database lost commits: the signer is quarantined), nonces taken by
// transactions without an attempt on record (recognised as ours, or failed when another
// transaction took them for good), and nonce holes (filled with placeholders). Each is
// something a machine can settle; nothing waits for a person unless the configuration says
// so.
package reconcile

import (
	"context"
	"errors"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/go-kratos/kratos/v2/log"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// Config is how the stage reconciles.
type Config struct {
	// AdoptUnknownChainNonces: a key also used outside the service; allocation goes on above
	// nonces the database does not know instead of quarantining the signer.
	AdoptUnknownChainNonces bool
	// ScanBlocks bounds how far back a taken nonce's transaction is looked for.
	ScanBlocks uint64
	// Confirmations make a foreign transaction at a taken nonce final for this stage; with
	// UseFinalizedTag (a chain whose finality is the node's "finalized" block) that block
	// must have reached it instead.
	Confirmations   uint64
	UseFinalizedTag bool
	// ResubmitInterval: a recognised attempt is broadcast again after this long.
	ResubmitInterval time.Duration
	// FillHoles turns hole filling on; HoleGrace is how long a hole must be seen before it
	// is filled, so a transaction sent outside the service that is still propagating is
	// not raced.
	FillHoles bool
	HoleGrace time.Duration
	// A quarantined signer's unknown transactions are always recorded as unclaimed rows,
	// adoptable by a retried create with the same intent for AdoptionWindow. RecoverByIntent
	// (recovery.mode adopt-by-intent) then releases the signer without a person; otherwise
	// (hold) an operator's release does.
	RecoverByIntent bool
	AdoptionWindow  time.Duration
}

// Store is the stage's view of the database. Every write is fenced on the lease and yields
// *domain.FencedError when the lease no longer matches.
type Store interface {
	// Quarantines and recoveries are told to webhook subscribers.
	services.EventAppender
	// SignerChainCheck reads what a pass compares with the chain.
	SignerChainCheck(ctx context.Context, signer string) (SignerCheck, error)
	// Quarantine records a quarantine; false when an operator already released those
	// nonces.
	Quarantine(ctx context.Context, lease domain.Lease, dbNext, chainNext uint64) (bool, error)
	// ListNonceTaken returns the signer's transactions whose nonce went to a transaction
	// without an attempt on record.
	ListNonceTaken(ctx context.Context, signer string, limit int) ([]domain.ManagedTx, error)
	// FailNonceTaken makes one of them final as FAILED_FINAL, with its completion.
	FailNonceTaken(ctx context.Context, lease domain.Lease, tx domain.ManagedTx, reason string) error
	// LowestOpenNonce is the signer's lowest nonce not yet final, -1 when none is open.
	LowestOpenNonce(ctx context.Context, signer string) (int64, error)
	// InsertPlaceholders stores placeholder transactions at free nonces and returns how
	// many it created.
	InsertPlaceholders(ctx context.Context, lease domain.Lease, txs []domain.ManagedTx) (int, error)

	// RecordRecovered stores transactions found on chain at lost nonces as unclaimed rows
	// with their attempts, adoptable until unclaimedUntil, and the recovery's progress with
	// them; a nonce that has a row already is left alone. It returns how many it stored.
	RecordRecovered(ctx context.Context, lease domain.Lease, txs []RecoveredTx, unclaimedUntil time.Time, resubmitAfter time.Duration, progress RecoveryProgress) (int, error)
	// RecoveryAnchors returns up to limit of the signer's transactions on record below
	// nonce, newest first: where a recovery's scan of the chain may start.
	RecoveryAnchors(ctx context.Context, signer string, below uint64, limit int) ([]RecoveryAnchor, error)
	// FinishRecovery moves the cursor to chainNonce (never back) and releases the
	// quarantine, together; false when there was no quarantine to release.
	FinishRecovery(ctx context.Context, lease domain.Lease, chainNonce uint64, note string) (bool, error)
	// ExpireUnclaimed ends the adoption window of the signer's recovered rows past it (their
	// held-back completions are written) and returns how many.
	ExpireUnclaimed(ctx context.Context, lease domain.Lease) (int, error)
}

// SignerCheck is a signer's state as reconciliation reads it.
type SignerCheck struct {
	// NextNonce is the cursor (-1: the signer has none yet).
	NextNonce int64
	// Quarantine is the live quarantine with its recovery's progress, nil when none.
	Quarantine *Recovery
	// UnclaimedExpired: some recovered row's adoption window has ended.
	UnclaimedExpired bool
}

// NonceRange is the nonces [From, To).
type NonceRange struct{ From, To uint64 }

// Recovery is a live quarantine as its recovery sees it: the unknown nonces and how far
// recording them got.
type Recovery struct {
	NonceRange
	RecoveryProgress
	// Recorded counts the rows recorded so far.
	Recorded int64
	// DetectedAt is when the quarantine began.
	DetectedAt time.Time
	// ReleaseRequested: an operator released the signer; it serves once recording is done.
	ReleaseRequested bool
}

// RecoveryProgress is how far a recovery got, committed with the rows it records.
type RecoveryProgress struct {
	// RecordedTo: every unknown nonce below it has its row.
	RecordedTo uint64
	// ScanFrom is the block the next scan starts at; nil until found.
	ScanFrom *uint64
}

// RecoveryAnchor is a transaction on record below the unknown nonces.
type RecoveryAnchor struct {
	Nonce uint64
	Hash  common.Hash
	// Block it was mined in as recorded (0: not recorded).
	Block uint64
}

// Reconciler runs the stage for the signers whose lease this node holds.
type Reconciler struct {
	cfg      Config
	store    Store
	attempts pipeline.AttemptStore
	chain    services.ChainHistory
	leases   *services.LeaseManager
	clock    services.Clock
	metrics  *telemetry.Metrics
	log      *log.Helper
	holes    *holeTracker
	// belowWindow are the scans for taken nonces below the window on nodes that keep no old
	// state; a signer's passes run one at a time, so each scan has one user.
	belowWindow *belowWindowScans
}

// New builds the stage.
func New(cfg Config, store Store, attempts pipeline.AttemptStore, chain services.ChainHistory, leases *services.LeaseManager, clock services.Clock,
	metrics *telemetry.Metrics, logger log.Logger) (*Reconciler, error) {
	r := &Reconciler{cfg: cfg, store: store, attempts: attempts, chain: chain, leases: leases, clock: clock, metrics: metrics,
		log:         log.NewHelper(log.With(logger, "component", "pipeline", "node_id", leases.Node())),
		holes:       &holeTracker{seen: map[string]seenHole{}},
		belowWindow: &belowWindowScans{bySigner: map[common.Address]*belowWindowScan{}},
	}
	return r, nil
}

// PassOutcome is what a reconciliation pass wrote that other stages act on.
type PassOutcome struct {
	// Placeholders are rows below the nonces the signer's submitter has signed, which it
	// reads only when told.
	Placeholders int
	// Recorded are transactions found on chain and recorded (recovered rows, or a taken
	// nonce's transaction that proved to be the row's own): followed to finality from now on.
	Recorded int
	// Quarantined: the signer is still quarantined after the pass; its recovery goes on at
	// the next pass, which should come soon.
	Quarantined bool
}

// Pass reconciles one signer, each step in the order a head of line needs it: a nonce hole
// is filled; a chain ahead of the database quarantines the signer, and in adopt-by-intent
// mode the chain's unknown transactions are recorded and the signer released; adoption
// windows that ended are closed; nonces taken by transactions without an attempt on
// record are settled.
func (r *Reconciler) Pass(ctx context.Context, lease domain.Lease) (PassOutcome, error) {
	var out PassOutcome
	var holeErr error
	out.Placeholders, holeErr = r.FillNonceHoles(ctx, lease)
	check, aheadErr := r.CheckChainAhead(ctx, lease)
	var recoverErr, expireErr error
	if aheadErr == nil && check.Quarantine != nil {
		var recovered int
		recovered, recoverErr = r.RecoverFromChain(ctx, lease, *check.Quarantine)
		out.Recorded += recovered
		out.Quarantined = true
	}
	if aheadErr == nil && check.UnclaimedExpired {
		_, expireErr = r.ExpireUnclaimed(ctx, lease)
	}
	settled, takenErr := r.SettleTakenNonces(ctx, lease)
	out.Recorded += settled
	return out, errors.Join(holeErr, aheadErr, recoverErr, expireErr, takenErr)
}
