// Package submitting is the pipeline stage that signs and sends: a signer's allocated
// transactions are signed, stored (fenced) and only then broadcast, in nonce order; those
// not mined within the resubmit interval go out again, re-priced when the market moved
// past their fees.
package submitting

import (
	"context"
	"errors"
	"math/big"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// Config tunes the stage.
type Config struct {
	// Batch bounds the transactions signed per signer per pass.
	Batch int
	// SignConcurrency bounds the signatures of one batch in flight at once.
	SignConcurrency int
	// ResubmitInterval: a broadcast transaction without a receipt is broadcast again after
	// this long.
	ResubmitInterval time.Duration
	Fees             services.FeePolicy
	// GasEstimateMultiplier and MaxGasLimit pad a gas limit estimated again, as the create
	// pads its first estimate (create.gasEstimateMultiplier, create.maxGasLimit).
	GasEstimateMultiplier float64
	MaxGasLimit           uint64
}

// DueResubmit is a transaction whose current attempt is due to be broadcast again.
type DueResubmit struct {
	TxID uuid.UUID
	// Current is the current attempt: its hash, signed bytes, kind and fees.
	Current        common.Hash
	Raw            []byte
	Kind           pipeline.AttemptKind
	MaxFee, MaxTip *big.Int
	// IntentMaxFee and IntentMaxTip are the fees the client named (nil when it named none):
	// a re-priced attempt never goes above them.
	IntentMaxFee, IntentMaxTip *big.Int
	// AllHashes are every attempt's hashes: any of them may be what the node has.
	AllHashes []common.Hash
	// SubState is what the transaction's last answer recorded: through the outcome table
	// (services.StepAfter) it decides what this resubmission does with the fees.
	SubState domain.SubState
	// IntentGasLimit is the gas limit the client named (0: none, the service estimated it);
	// AdmittedGasLimit the one the create was admitted with: its worst-case fee, gas limit
	// x fee cap, is what the funds check and the spending policies counted.
	IntentGasLimit, AdmittedGasLimit uint64
}

// AllocatedTx is an ALLOCATED transaction as the stage reads it: what its first attempt is
// signed from.
type AllocatedTx struct {
	ID                uuid.UUID
	Signer            common.Address
	Nonce             uint64
	Intent            domain.Intent
	EffectiveGasLimit uint64
}

// Replacement is a re-priced attempt that takes over from the attempt Replaced.
type Replacement struct {
	Replaced common.Hash
	Attempt  pipeline.SignedAttempt
}

// Store is the stage's view of the database. Every write is fenced on the lease and yields
// *domain.FencedError when the lease no longer matches.
type Store interface {
	// ListAllocated lists the signer's ALLOCATED transactions at or above nonce from, lowest
	// first.
	ListAllocated(ctx context.Context, signer string, from uint64, limit int) ([]AllocatedTx, error)
	// AllocationCursor is the signer's nonce cursor: whatever is allocated after the read is
	// at or above it.
	AllocationCursor(ctx context.Context, signer string) (uint64, error)
	// MarkSigned stores the attempts of the transactions still ALLOCATED and moves those to
	// TRACKING (SIGNED); it returns their ids. The others have moved on meanwhile and keep
	// what happened to them: their attempts are neither stored nor sent.
	MarkSigned(ctx context.Context, lease domain.Lease, attempts []pipeline.SignedAttempt, resubmitAfter time.Duration) ([]uuid.UUID, error)
	ListResubmitDue(ctx context.Context, signer string, limit int) ([]DueResubmit, error)
	// NextResubmitIn is how long until the first of the signer's broadcast, unmined
	// transactions is due again (zero or less: now), and whether it has any.
	NextResubmitIn(ctx context.Context, signer string) (time.Duration, bool, error)
	// ClaimResubmits claims those of txIDs still due and returns them.
	ClaimResubmits(ctx context.Context, lease domain.Lease, txIDs []uuid.UUID, resubmitAfter time.Duration) ([]uuid.UUID, error)
	// RecordReplacements stores re-priced attempts as their transactions' current ones and
	// returns the transactions whose current attempt they became.
	RecordReplacements(ctx context.Context, lease domain.Lease, replacements []Replacement) ([]uuid.UUID, error)
}

// Chain is what the stage asks of the node: fees to sign at, and a way to send.
type Chain interface {
	services.FeeSource
	services.TxSender
	// GasEstimator re-estimates a gas limit the L1 part outgrew (regas.go).
	services.GasEstimator
}

// Submitter runs the stage for the signers whose lease this node holds.
type Submitter struct {
	cfg         Config
	store       Store
	chain       Chain
	signer      *pipeline.Signer
	broadcaster *pipeline.Broadcaster
	leases      *services.LeaseManager
	metrics     *telemetry.Metrics
	log         *log.Helper
	server      services.DatabaseServerEpoch
	unsigned    unsignedFrontiers
	resubmits   resubmitQuiet
	// regasWarned are the transactions a re-gas left undone was logged for (regas.go).
	regasWarned   sync.Map
	regasWarnings atomic.Int64
	// signing learns whether each signer's key source signs.
	signing *services.SigningHealth
	now     func() time.Time
	// replaced runs after re-pricing stored replacement attempts.
	replaced func()
}

// OnReplaced sets what runs after re-pricing stored replacement attempts: the receipt
// schedule learns the new hashes from it. Call before the stage runs.
func (s *Submitter) OnReplaced(fn func()) { s.replaced = fn }

// New builds the stage. What signing learns of a signer is dropped when its lease ends.
func New(cfg Config, store Store, chain Chain, signer *pipeline.Signer, broadcaster *pipeline.Broadcaster,
	leases *services.LeaseManager, server services.DatabaseServerEpoch, signing *services.SigningHealth, metrics *telemetry.Metrics, logger log.Logger) *Submitter {
	if signing != nil {
		signing.FollowLeases(leases)
	}
	return &Submitter{cfg: cfg, store: store, chain: chain, signer: signer, broadcaster: broadcaster, leases: leases, server: server, signing: signing,
		metrics: metrics, now: time.Now, log: log.NewHelper(log.With(logger, "component", "pipeline", "node_id", leases.Node()))}
}

// SubmitAllocated signs the signer's ALLOCATED transactions (lowest nonce first) in
// batches of Config.Batch, persists every batch's attempts fenced, and only then
// broadcasts them, batch after batch in nonce order, until none is left. While one batch
// is on its way to the node, the next is signed and stored: for a hot signer the node's
// intake, not signing and the database, sets the pace. stored (when not nil) is told each
// batch once its attempts are stored and before any is sent: bytes no node has seen yet.
func (s *Submitter) SubmitAllocated(ctx context.Context, lease domain.Lease, stored func([]pipeline.TrackedTx)) (int, error) {
	total := 0
	var sending chan error // the batch on its way to the node; nil when none is
	sent := func() error {
		if sending == nil {
			return nil
		}
		err := <-sending
		sending = nil
		return err
	}
	for ctx.Err() == nil {
		next, more, err := s.signAndStore(ctx, lease, stored)
		sendErr := sent()
		if len(next) == 0 {
			return total, errors.Join(sendErr, err)
		}
		total += len(next)
		if err != nil || sendErr != nil || ctx.Err() != nil {
			// The pass ends here (a signature failed part-way through the batch, the
			// batch before failed to record its outcome, or the node is stopping), but
			// next is stored: it goes out now rather than leave a gap below every later
			// nonce until its resubmission. When the lease is gone its outcome is the
			// new owner's to learn.
			var fenced *domain.FencedError
			return total, errors.Join(err, sendErr, s.sendStored(ctx, lease, next, !errors.As(sendErr, &fenced)))
		}
		if !more {
			// The list held every ALLOCATED row of the signer as of its read: the pass is
			// done without a read that finds nothing. A batch allocated since then woke the
			// loop (NotifyAllocated) for another pass.
			return total, s.sendStored(ctx, lease, next, true)
		}
		done := make(chan error, 1)
		go func() { done <- s.sendStored(ctx, lease, next, true) }()
		sending = done
	}
	return total, sent()
}

// Rescan makes the signer's next pass read every open row for ALLOCATED ones, not only
// those above the nonces it signed: for rows written below them (placeholders filling a
// nonce hole).
func (s *Submitter) Rescan(signer string) { s.unsigned.rescan(signer) }

// Allocated notes that this node allocated the signer's transactions below next under
// lease (committed): a pass that has signed up to there has nothing to read until the next.
func (s *Submitter) Allocated(lease domain.Lease, next uint64) {
	s.unsigned.allocated(lease.Signer, lease.Token, next)
}

// storedSendTimeout bounds sending a stored batch, which runs on after its pass's context
// ends (each call to the chain has its own deadline too).
const storedSendTimeout = 30 * time.Second

// signAndStore signs up to a batch of the signer's ALLOCATED transactions and stores their
// attempts fenced (the transactions become TRACKING); nothing is sent. more reports a full
// batch: there may be ALLOCATED rows beyond it. When a signature fails, the attempts signed
// below it are stored and returned with the failure.
func (s *Submitter) signAndStore(ctx context.Context, lease domain.Lease, stored func([]pipeline.TrackedTx)) (attempts []pipeline.SignedAttempt, more bool, err error) {
	ctx, span := pipeline.Span(ctx, s.metrics, "pipeline.sign", lease)
	defer span.End()
	at := frontierEpoch{signer: lease.Signer, token: lease.Token, server: s.server.ServerEpoch()}
	now := time.Now()
	if s.unsigned.allSigned(at, now) {
		return nil, false, nil
	}
	from, full := s.unsigned.from(at, now)
	var cursor uint64
	if full {
		// Read before the scan: anything allocated after the scan's snapshot is at or above it.
		next, err := s.store.AllocationCursor(ctx, lease.Signer)
		if err != nil {
			return nil, false, err
		}
		cursor = next
	}
	limit := max(s.cfg.Batch, 1)
	txs, err := s.store.ListAllocated(ctx, lease.Signer, from, limit)
	if err != nil {
		return nil, false, err
	}
	if full {
		s.unsigned.scanned(at, time.Now(), txs, cursor)
	}
	if len(txs) == 0 {
		return nil, false, nil
	}
	suggestion, err := s.chain.SuggestFees(ctx)
	if err != nil {
		return nil, false, &domain.UnavailableError{Reason: "fee suggestion", RetryAfter: time.Second, Err: err}
	}
	batch := make([]pipeline.ToSign, 0, len(txs))
	for _, tx := range txs {
		u, err := s.original(tx, suggestion)
		if err != nil {
			return nil, false, err
		}
		batch = append(batch, pipeline.ToSign{TxID: tx.ID, Kind: pipeline.AttemptOriginal, Unsigned: u})
	}
	concurrency := s.cfg.SignConcurrency
	if s.signing.Failing(lease) {
		// One signature at a time while the key source fails: a throttled KMS is not sent a
		// batch's worth of calls a pass (each retried by its SDK), a dead key costs one.
		concurrency = 1
	}
	attempts, signErr := s.signer.SignInOrder(ctx, batch, concurrency)
	if len(attempts) == 0 {
		s.signing.Observe(ctx, lease, signErr)
		return nil, false, signErr
	}
	// Signatures came back: the key source signs, throttled or not. A refusal that holds is
	// seen again at the next pass, where it comes first.
	s.signing.Observe(ctx, lease, nil)
	signedIDs, err := s.store.MarkSigned(ctx, lease, attempts, s.cfg.ResubmitInterval)
	if err != nil {
		return nil, false, errors.Join(s.leases.Fence(ctx, lease, err), signErr)
	}
	s.unsigned.signedThrough(at, attempts[len(attempts)-1].Nonce)
	if len(signedIDs) < len(attempts) {
		attempts = slices.DeleteFunc(attempts, func(a pipeline.SignedAttempt) bool { return !slices.Contains(signedIDs, a.TxID) })
	}
	if stored != nil && len(attempts) > 0 {
		stored(pipeline.Tracked(lease.Signer, attempts))
	}
	return attempts, len(txs) == limit, signErr
}

// original is the first attempt's transaction for tx: its intent at the policy's initial
// fees.
func (s *Submitter) original(tx AllocatedTx, suggestion services.FeeSuggestion) (pipeline.Unsigned, error) {
	maxFee, maxTip, err := s.cfg.Fees.ForGasLimit(tx.EffectiveGasLimit).Initial(tx.Intent, suggestion)
	if err != nil {
		return pipeline.Unsigned{}, err
	}
	return pipeline.Unsigned{From: tx.Signer, Nonce: tx.Nonce, To: tx.Intent.To, Value: tx.Intent.Value, Data: tx.Intent.Data,
		Gas: tx.EffectiveGasLimit, MaxFee: maxFee, MaxTip: maxTip, Legacy: suggestion.Legacy, BaseFee: suggestion.BaseFee}, nil
}

// sendStored broadcasts stored attempts in nonce order and, when record, records the
// outcomes (fenced). It does not stop with ctx: once stored, the bytes are this signer's
// transactions whoever owns it, and any owner would send exactly these.
func (s *Submitter) sendStored(ctx context.Context, lease domain.Lease, attempts []pipeline.SignedAttempt, record bool) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storedSendTimeout)
	defer cancel()
	ctx, span := pipeline.Span(ctx, s.metrics, "pipeline.submit", lease)
	defer span.End()
	if !record {
		raws := make([][]byte, len(attempts))
		for i, a := range attempts {
			raws[i] = a.Raw
		}
		_, err := s.chain.SendRawTransactions(ctx, raws)
		return err
	}
	items := make([]pipeline.BroadcastItem, len(attempts))
	for i, a := range attempts {
		items[i] = pipeline.BroadcastItem{TxID: a.TxID, Raw: a.Raw, Ours: []common.Hash{a.Hash}, FirstSend: true}
	}
	outcomes, err := s.broadcaster.Broadcast(ctx, lease, items)
	if err != nil {
		return err
	}
	s.outbidAtOnce(outcomes)
	s.log.WithContext(ctx).Infow("msg", "transactions signed and broadcast", "signer", lease.Signer, "fencing_token", lease.Token,
		"count", len(attempts), "first_nonce", attempts[0].Nonce, "first_tx_id", attempts[0].TxID.String(), "state", string(domain.StateTracking))
	return nil
}
