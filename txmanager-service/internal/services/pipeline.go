package services

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/uuid"

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

	chainIDOnce sync.Once
	chainID     *big.Int
	chainIDErr  error
}

// NewPipeline wires the pipeline.
func NewPipeline(cfg PipelineConfig, store PipelineStore, chain Chain, signer TxSigner, leases *LeaseManager, hook StuckResolutionHook, clock Clock, metrics *telemetry.Metrics, logger log.Logger) *Pipeline {
	return &Pipeline{
		cfg: cfg, store: store, chain: chain, signer: signer, leases: leases, hook: hook, clock: clock, metrics: metrics,
		log: log.NewHelper(log.With(logger, "component", "pipeline", "node_id", leases.Node())),
	}
}

func (p *Pipeline) chainIDOf(ctx context.Context) (*big.Int, error) {
	p.chainIDOnce.Do(func() { p.chainID, p.chainIDErr = p.chain.ChainID(ctx) })
	if p.chainIDErr != nil {
		// Do not cache a failure: let the next pass try again.
		err := p.chainIDErr
		p.chainIDOnce = sync.Once{}
		return nil, err
	}
	return p.chainID, nil
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
func (p *Pipeline) sign(ctx context.Context, from common.Address, nonce uint64, to *common.Address, value *big.Int, data []byte,
	gas uint64, maxFee, maxTip *big.Int) (*types.Transaction, []byte, error) {
	chainID, err := p.chainIDOf(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("chain id: %w", err)
	}
	unsigned := types.NewTx(&types.DynamicFeeTx{
		ChainID: chainID, Nonce: nonce, GasTipCap: maxTip, GasFeeCap: maxFee, Gas: gas, To: to, Value: value, Data: data,
	})
	signed, err := p.signer.SignTx(ctx, from, unsigned, chainID)
	if err != nil {
		return nil, nil, err
	}
	raw, err := signed.MarshalBinary()
	if err != nil {
		return nil, nil, err
	}
	return signed, raw, nil
}

// broadcast sends raw and records the outcome. "already known" and "nonce too low" after
// a lost response are settled by comparing hashes with what the node has, never guessed.
func (p *Pipeline) broadcast(ctx context.Context, lease domain.Lease, txID uuid.UUID, raw []byte, ours []common.Hash) (string, error) {
	sendErr := p.chain.SendRawTransaction(ctx, raw)
	subState, lastError, result := SubStateSubmitted, "", "submitted"
	switch {
	case sendErr == nil:
	case errors.Is(sendErr, ErrKnownTransaction):
		result = "known"
	case errors.Is(sendErr, ErrNonceTooLow):
		known, err := p.chain.TransactionsKnown(ctx, ours)
		switch {
		case err != nil:
			subState, lastError, result = SubStateBroadcastFailed, "nonce too low; could not check our hashes: "+err.Error(), "error"
		case anyTrue(known):
			result = "nonce_too_low_ours"
		default:
			subState, lastError, result = SubStateNonceTaken, "nonce used by a transaction this service did not sign", "nonce_taken"
		}
	case errors.Is(sendErr, ErrUnderpriced):
		subState, lastError, result = SubStateUnderpriced, sendErr.Error(), "underpriced"
	case errors.Is(sendErr, ErrInsufficientFunds):
		subState, lastError, result = SubStateInsufficientFunds, sendErr.Error(), "insufficient_funds"
	default:
		subState, lastError, result = SubStateBroadcastFailed, sendErr.Error(), "error"
	}
	p.metrics.TxSubmit(ctx, result)
	if err := p.store.RecordBroadcast(ctx, lease, txID, subState, lastError); err != nil {
		return result, p.fenced(ctx, lease, err)
	}
	if result != "submitted" {
		p.log.Infow("msg", "broadcast outcome", "signer", lease.Signer, "tx_id", txID.String(), "fencing_token", lease.Token,
			"result", result, "sub_state", subState, "last_error", lastError)
	}
	return result, nil
}

func anyTrue(values []bool) bool {
	for _, v := range values {
		if v {
			return true
		}
	}
	return false
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
