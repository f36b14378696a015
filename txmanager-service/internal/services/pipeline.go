package services

import (
	"context"
	"errors"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// PipelineConfig tunes everything after allocation (SPEC 4.6-4.7).
type PipelineConfig struct {
	// SubmitBatch bounds the transactions signed per signer per pass.
	SubmitBatch int
	// ResubmitInterval: a broadcast transaction without a receipt is broadcast again after
	// this long.
	ResubmitInterval time.Duration
	// Confirmations required for finality (when UseFinalizedTag is false).
	Confirmations uint64
	// UseFinalizedTag: final when the node's "finalized" block has reached the receipt.
	UseFinalizedTag bool
	Fees            FeePolicy
	Stuck           StuckConfig
	Holes           HoleConfig
	Recovery        RecoveryConfig
}

// Sub-states: the detail under a state.
const (
	SubStateSigned            = "SIGNED"
	SubStateSubmitted         = "SUBMITTED"
	SubStateBroadcastFailed   = "BROADCAST_FAILED"
	SubStateUnderpriced       = "UNDERPRICED"
	SubStateInsufficientFunds = "INSUFFICIENT_FUNDS"
	SubStateNonceTaken        = "NONCE_TAKEN"
	SubStateReverted          = "REVERTED"
	SubStateCancelled         = "CANCELLED"
	// SubStateRecognised: the nonce's transaction on chain was found to be this one's own.
	SubStateRecognised = "RECOGNISED"
)

// Pipeline carries a transaction from ALLOCATED to a final state: signing and broadcast,
// receipts, finality through reorgs, resubmission and stuck resolution. Each method works on
// signers whose lease this node holds and writes only through fenced statements; the
// workers decide when to call them.
type Pipeline struct {
	cfg     PipelineConfig
	store   PipelineStore
	chain   Chain
	signer  TxSigner
	leases  *LeaseManager
	hook    StuckResolutionHook
	clock   Clock
	metrics *telemetry.Metrics
	log     *log.Helper
	chainID ChainID
	holes   *holeTracker
	// checks and quarantine serve the reconciliation with a chain that is ahead.
	checks     ChainCheckStore
	quarantine *quarantineGauge
}

// ChainID is the id of the chain every transaction is signed for, read once when the
// service connects to the chain.
type ChainID struct{ *big.Int }

// NewPipeline wires the pipeline and registers the pending-age gauge.
func NewPipeline(cfg PipelineConfig, store PipelineStore, checks ChainCheckStore, chain Chain, chainID ChainID, signer TxSigner, leases *LeaseManager,
	hook StuckResolutionHook, clock Clock, metrics *telemetry.Metrics, logger log.Logger) (*Pipeline, error) {
	p := &Pipeline{
		cfg: cfg, store: store, chain: chain, chainID: chainID, signer: signer, leases: leases, hook: hook, clock: clock, metrics: metrics,
		log:        log.NewHelper(log.With(logger, "component", "pipeline", "node_id", leases.Node())),
		holes:      &holeTracker{seen: map[string]seenHole{}},
		checks:     checks,
		quarantine: &quarantineGauge{signers: map[string]bool{}},
	}
	if err := registerQuarantineGauge(metrics, p.quarantine); err != nil {
		return nil, err
	}
	err := metrics.RegisterFloatGauge(telemetry.PendingOldestAgeSeconds,
		"Age of the oldest unfinished transaction, per signer this node holds.",
		func(ctx context.Context, record func(float64, ...attribute.KeyValue)) {
			signers := leases.HeldSigners()
			if len(signers) == 0 {
				return
			}
			ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			ages, err := store.OldestPendingAges(ctx, signers)
			if err != nil {
				return // a scrape must not fail because the database is slow
			}
			for _, signer := range signers {
				record(ages[signer], attribute.String("signer", signer))
			}
		})
	return p, err
}

// span starts a span for one piece of work on a signer.
func (p *Pipeline) span(ctx context.Context, name string, lease domain.Lease) (context.Context, trace.Span) {
	return p.metrics.Tracer.Start(ctx, name, trace.WithAttributes(
		attribute.String("signer", lease.Signer), attribute.Int64("fencing_token", int64(lease.Token))))
}

// fenced reports a fenced write to the lease manager (which drops the lease, evicts caches
// and counts it) and returns err.
func (p *Pipeline) fenced(ctx context.Context, lease domain.Lease, err error) error {
	var f *domain.FencedError
	if errors.As(err, &f) {
		p.leases.Fenced(ctx, lease, f.Write)
	}
	return err
}

// sign builds and signs one EIP-1559 transaction.
// sign signs an EIP-1559 transaction, or a legacy one (gas price maxFee) on a chain
// without a base fee.
func (p *Pipeline) sign(ctx context.Context, from common.Address, nonce uint64, to *common.Address, value *big.Int, data []byte,
	gas uint64, maxFee, maxTip *big.Int, legacy bool) (*types.Transaction, []byte, error) {
	unsigned := types.NewTx(&types.DynamicFeeTx{
		ChainID: p.chainID.Int, Nonce: nonce, GasTipCap: maxTip, GasFeeCap: maxFee, Gas: gas, To: to, Value: value, Data: data,
	})
	if legacy {
		unsigned = types.NewTx(&types.LegacyTx{Nonce: nonce, GasPrice: maxFee, Gas: gas, To: to, Value: value, Data: data})
	}
	signed, err := p.signer.SignTx(ctx, from, unsigned, p.chainID.Int)
	if err != nil {
		return nil, nil, err
	}
	raw, err := signed.MarshalBinary()
	if err != nil {
		return nil, nil, err
	}
	return signed, raw, nil
}

// broadcastItem is one signed transaction to send: its bytes and every hash of ours the
// node might know for its nonce.
type broadcastItem struct {
	TxID uuid.UUID
	Raw  []byte
	Ours []common.Hash
}

// broadcast sends the items in one batched round trip (in order) and records each
// outcome. "already known" and "nonce too low" after a lost response are settled by
// comparing hashes with what the node has, never guessed.
func (p *Pipeline) broadcast(ctx context.Context, lease domain.Lease, items []broadcastItem) ([]BroadcastOutcome, error) {
	raws := make([][]byte, len(items))
	for i, it := range items {
		raws[i] = it.Raw
	}
	sendErrs, err := p.chain.SendRawTransactions(ctx, raws)
	if err != nil {
		sendErrs = make([]error, len(items))
		for i := range sendErrs {
			sendErrs[i] = err
		}
	}
	known := p.ourHashesKnown(ctx, items, sendErrs)
	outcomes := make([]BroadcastOutcome, len(items))
	for i, it := range items {
		o := BroadcastOutcome{TxID: it.TxID, SubState: SubStateSubmitted, Result: "submitted"}
		switch sendErr := sendErrs[i]; {
		case sendErr == nil:
		case errors.Is(sendErr, ErrKnownTransaction):
			o.Result = "known"
		case errors.Is(sendErr, ErrNonceTooLow):
			switch k, checked := known[it.TxID]; {
			case !checked:
				o.SubState, o.LastError, o.Result = SubStateBroadcastFailed, "nonce too low; our hashes could not be checked", "error"
			case k:
				o.Result = "nonce_too_low_ours"
			default:
				o.SubState, o.LastError, o.Result = SubStateNonceTaken, "nonce used by a transaction this service did not sign", "nonce_taken"
			}
		case errors.Is(sendErr, ErrUnderpriced):
			o.SubState, o.LastError, o.Result = SubStateUnderpriced, sendErr.Error(), "underpriced"
		case errors.Is(sendErr, ErrInsufficientFunds):
			o.SubState, o.LastError, o.Result = SubStateInsufficientFunds, sendErr.Error(), "insufficient_funds"
		default:
			o.SubState, o.LastError, o.Result = SubStateBroadcastFailed, sendErr.Error(), "error"
		}
		outcomes[i] = o
		p.metrics.TxSubmit(ctx, o.Result)
	}
	if err := p.store.RecordBroadcasts(ctx, lease, outcomes); err != nil {
		return outcomes, p.fenced(ctx, lease, err)
	}
	for _, o := range outcomes {
		if o.Result != "submitted" {
			p.log.WithContext(ctx).Infow("msg", "broadcast outcome", "signer", lease.Signer, "tx_id", o.TxID.String(), "fencing_token", lease.Token,
				"result", o.Result, "sub_state", o.SubState, "last_error", o.LastError)
		}
	}
	return outcomes, nil
}

// ourHashesKnown asks the node, in one batch, whether it has any of our hashes for the
// items answered "nonce too low". Items it could not check are absent from the result.
func (p *Pipeline) ourHashesKnown(ctx context.Context, items []broadcastItem, sendErrs []error) map[uuid.UUID]bool {
	var hashes []common.Hash
	var owners []uuid.UUID
	for i, it := range items {
		if errors.Is(sendErrs[i], ErrNonceTooLow) {
			for _, h := range it.Ours {
				hashes = append(hashes, h)
				owners = append(owners, it.TxID)
			}
		}
	}
	out := map[uuid.UUID]bool{}
	if len(hashes) == 0 {
		return out
	}
	known, err := p.chain.TransactionsKnown(ctx, hashes)
	if err != nil {
		p.log.Warnw("msg", "checking our hashes after nonce too low failed", "error", err.Error())
		return out
	}
	for i, k := range known {
		out[owners[i]] = out[owners[i]] || k
	}
	return out
}

// AwaitingReceipt lists the broadcast, unmined transactions of the signers.
func (p *Pipeline) AwaitingReceipt(ctx context.Context, signers []string) ([]TrackedTx, error) {
	return p.store.ListAwaitingReceipt(ctx, signers)
}

// AdoptOpenSigners keeps the leases of signers with unfinished transactions: renewed while
// this node holds them, and acquired when nobody does (after a restart or a peer's
// departure), so every open transaction has some node driving it.
func (p *Pipeline) AdoptOpenSigners(ctx context.Context) error {
	open, err := p.store.ListOpenSigners(ctx)
	if err != nil {
		return err
	}
	for _, s := range open {
		if _, held := p.leases.Current(s.Signer); held {
			p.leases.Touch(s.Signer)
			continue
		}
		if s.LeaseLive {
			continue // a live peer drives it
		}
		if _, err := p.leases.Acquire(ctx, s.Signer); err != nil && !errors.Is(err, domain.ErrNotLeader) {
			p.log.Warnw("msg", "could not adopt signer", "signer", s.Signer, "error", err.Error())
		}
	}
	return nil
}
