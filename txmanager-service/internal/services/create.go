package services

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/params"
	"github.com/go-kratos/kratos/v2/log"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// CreateConfig tunes the create use case.
type CreateConfig struct {
	Limits domain.Limits
	// EstimateGas: intents without a gas limit are estimated before allocation; when false
	// such intents are rejected.
	EstimateGas bool
	// SimulateCalls: intents that carry call data and a gas limit are still run through
	// eth_estimateGas, capped at that limit, so one that cannot run (a revert, an invalid
	// opcode, too little gas) is refused before it takes a nonce. Plain transfers skip it.
	SimulateCalls bool
	// GasEstimateMultiplier pads estimates (e.g. 1.2) against state changing before mining.
	GasEstimateMultiplier float64
	// FeeCap is the most any attempt pays per gas (fees.maxFeePerGas; nil: unbounded): the
	// worst case per gas of an intent that names no maxFeePerGas, for spending policies.
	FeeCap *big.Int
}

// CreateTxUseCase validates an intent, answers idempotent replays, estimates gas where
// needed, and hands the rest to the writer (docs/design.md#the-create-path). Nothing
// that fails before the writer consumes a nonce.
type CreateTxUseCase struct {
	cfg     CreateConfig
	signers SignerDirectory
	txs     TxReader
	chain   CallSimulator
	leases  *LeaseManager
	funds   *FundsGuard
	signing *SigningHealth
	queue   AllocationQueue
	// standby holds a replay's answer back until its transaction is on the standby.
	standby *StandbyWait
	clock   Clock
	metrics *telemetry.Metrics
	log     *log.Helper
}

// NewCreateTxUseCase wires the use case.
func NewCreateTxUseCase(cfg CreateConfig, signers SignerDirectory, txs TxReader, chain CallSimulator, leases *LeaseManager, funds *FundsGuard, signing *SigningHealth,
	queue AllocationQueue, standby *StandbyWait, clock Clock, metrics *telemetry.Metrics, logger log.Logger) *CreateTxUseCase {
	return &CreateTxUseCase{cfg: cfg, signers: signers, txs: txs, chain: chain, leases: leases, funds: funds, signing: signing, queue: queue, standby: standby,
		clock: clock, metrics: metrics, log: log.NewHelper(log.With(logger, "component", "create"))}
}

// CreateResult is a created or replayed transaction.
type CreateResult struct {
	Tx domain.ManagedTx
	// Created is false for an idempotent replay of an earlier request.
	Created bool
}

// Create runs the use case.
func (uc *CreateTxUseCase) Create(ctx context.Context, in domain.CreateInput) (CreateResult, error) {
	started := uc.clock.Now()
	res, err := uc.create(ctx, in, nil)
	uc.metrics.TxCreate(ctx, createResultLabel(res, err), uc.clock.Now().Sub(started).Seconds())
	return res, err
}

// AdmitApproved runs an approved intent through the create path as its requester's create:
// every check and policy applies again but the approval rule, and the transaction takes
// the approval's id. The writer allocates it only while the approval is APPROVED, in the
// transaction that marks it ADMITTED, so it is admitted once however often this runs.
func (uc *CreateTxUseCase) AdmitApproved(ctx context.Context, a domain.Approval) (CreateResult, error) {
	return uc.create(ctx, a.Input(), &a)
}

func (uc *CreateTxUseCase) create(ctx context.Context, in domain.CreateInput, approval *domain.Approval) (CreateResult, error) {
	req, err := domain.ParseCreateRequest(in, uc.cfg.Limits)
	if err != nil {
		return CreateResult{}, err
	}
	if approval != nil && req.Fingerprint() != approval.Fingerprint {
		return CreateResult{}, fmt.Errorf("%w: approval %s no longer parses to the intent it was asked with", domain.ErrInvalidArgument, approval.ID)
	}
	if err := uc.signers.Accepts(req.Signer); err != nil {
		// A retired signer's acknowledged creates are still answered to their retries.
		if errors.Is(err, domain.ErrSignerRetired) {
			if res, found, replayErr := uc.recorded(ctx, req, approval); found {
				return res, replayErr
			}
		}
		return CreateResult{}, err
	}
	// A create that will ask the chain before it is written (estimation, simulation) is
	// looked up first: a retry must not wait on the chain, nor run the simulation again.
	if uc.asksChainFirst(req) {
		if res, found, err := uc.recorded(ctx, req, approval); found {
			return res, err
		}
	}
	res, err := uc.allocate(ctx, req, approval)
	if err != nil && !errors.Is(err, domain.ErrIdempotencyConflict) {
		if res, found, err := uc.recorded(ctx, req, approval); found {
			return res, err
		}
	}
	return res, err
}

// adoptInstead answers a create the chain's checks or the funds check refused. After a
// database loss, a lost request's retry is checked against a chain its intent already ran
// on: a call that ran reverts now, a transfer of the whole balance finds it spent. When a
// recovered transaction with its recovery key waits for adoption, the create goes to the
// writer to adopt it (refused with refusal if none is left there); otherwise refusal stands.
// Only refused creates look: the path of every other create is unchanged.
func (uc *CreateTxUseCase) adoptInstead(ctx context.Context, req domain.CreateRequest, approval *domain.Approval, refusal error) (CreateResult, error) {
	if (req.RequestID == "" && approval == nil) || !(errors.Is(refusal, domain.ErrIntentReverts) || errors.Is(refusal, domain.ErrInsufficientFunds)) {
		return CreateResult{}, refusal
	}
	adoptable, err := uc.txs.HasAdoptable(ctx, req.Signer, req.RecoveryKey())
	if err != nil || !adoptable {
		return CreateResult{}, refusal
	}
	if _, err := uc.leases.Acquire(ctx, req.SignerHex); err != nil {
		return CreateResult{}, err
	}
	// The adopted transaction counts in its credential's policy windows, as its signer's, at
	// the fee cap it would have been admitted with.
	req.Admission = uc.admission(ctx, req, nil)
	req.Admission.AdoptOnly = refusal
	if approval != nil {
		// An approved intent's admission whose transaction a restored database lost: its
		// funds were spent, or its call no longer runs, by the transaction it adopts.
		req.Admission.Credential, req.Admission.ApprovalID = approval.Requester, approval.ID
	}
	tx, created, err := uc.queue.Allocate(ctx, req, max(req.Intent.GasLimit, 21_000), nil)
	if err != nil {
		return CreateResult{Tx: tx}, err
	}
	return uc.answer(ctx, tx, created)
}

// answer is the writer's answer to a create: a transaction it did not create (a replay, an
// adoption) is held back until it is on the database's standby (awaitStandby).
func (uc *CreateTxUseCase) answer(ctx context.Context, tx domain.ManagedTx, created bool) (CreateResult, error) {
	if !created {
		if err := uc.awaitStandby(ctx); err != nil {
			return CreateResult{}, err
		}
	}
	return CreateResult{Tx: tx, Created: created}, nil
}

// recordedLookupTimeout bounds the look-up of a failed create's requestId, which runs even
// when the create failed because its caller's deadline passed.
const recordedLookupTimeout = 2 * time.Second

// recorded answers req as a replay of the transaction already on record under its
// requestId, if any (the transaction, or a conflict when the intent differs). Other
// creates are looked up only when they fail: the writer checks every batch's requestIds
// inside its transaction anyway, so on the way to it a look-up would be a second database
// round trip per create (a tenth of the create path's CPU) that answers nothing new. A
// create that failed, though, may be the retry of one already acknowledged, and gets that
// transaction whatever holds new creates back now: no chain endpoint answering, another
// node owning the signer, a writer queue full or slow past the caller's deadline, funds the
// original spent. found is false when req has no requestId, none is on record, or the
// look-up failed. For a create that admits an approved intent (approval set), the approval
// itself holds the request id until it is admitted: it is what is being admitted, not a
// transaction on record to answer with, and counts as none.
func (uc *CreateTxUseCase) recorded(ctx context.Context, req domain.CreateRequest, approval *domain.Approval) (res CreateResult, found bool, err error) {
	if req.RequestID == "" {
		return CreateResult{}, false, nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordedLookupTimeout)
	defer cancel()
	existing, lookupErr := uc.txs.GetByRequestID(ctx, req.Signer, req.RequestID)
	if lookupErr != nil {
		return CreateResult{}, false, nil
	}
	if approval != nil && existing.ID == approval.ID && existing.State == domain.StateAwaitingApproval {
		return CreateResult{}, false, nil
	}
	if err := uc.awaitStandby(ctx); err != nil {
		return CreateResult{}, true, err
	}
	return CreateResult{Tx: existing}, true, domain.ReplayOf(existing, req.Fingerprint(), req.RequestID)
}

// awaitStandby holds an answer from a transaction already on record back until that
// transaction is on the database's synchronous standby. A create whose commit timed out
// waiting for the standby was answered OUTCOME_UNKNOWN, but its row stays on the primary,
// visible: answering the retry from it at once would acknowledge a transaction that a
// failover loses, and whose nonce then goes to another. Only replays wait: a create the
// writer wrote was answered after its own commit waited.
func (uc *CreateTxUseCase) awaitStandby(ctx context.Context) error {
	if err := uc.standby.Await(ctx); err != nil {
		return fmt.Errorf("%w: the transaction is on record but not known to be on the database's standby yet: %w", domain.ErrOutcomeUnknown, err)
	}
	return nil
}

// asksChainFirst: the create estimates its gas or simulates its call before it is written.
func (uc *CreateTxUseCase) asksChainFirst(req domain.CreateRequest) bool {
	given := req.Intent.GasLimit
	simulated := uc.cfg.SimulateCalls && (len(req.Intent.Data) > 0 || req.Intent.To == nil)
	return simulated || (given == 0 && uc.cfg.EstimateGas)
}

// allocate takes req to the writer and waits for its transaction.
func (uc *CreateTxUseCase) allocate(ctx context.Context, req domain.CreateRequest, approval *domain.Approval) (CreateResult, error) {
	// While no chain endpoint answers, a new transaction could neither be estimated nor
	// sent: refuse it at once rather than after a deadline, and consume no nonce.
	if err := uc.chain.Usable(); err != nil {
		return CreateResult{}, &domain.UnavailableError{Reason: "no chain endpoint answers", RetryAfter: time.Second, Err: err}
	}
	gasLimit, err := uc.gasLimit(ctx, req)
	if err != nil {
		return uc.adoptInstead(ctx, req, approval, err)
	}
	if err := uc.fitsInABlock(ctx, gasLimit); err != nil {
		return CreateResult{}, err
	}
	// Routing decision before queueing: a non-owner answers at once (basic mode).
	lease, err := uc.leases.Acquire(ctx, req.SignerHex)
	if err != nil {
		return CreateResult{}, err
	}
	// After the lease: the owner drives the signer's signing, and knows whether its key
	// source signs; a signer that cannot takes no more work than the bound.
	if err := uc.signing.Admit(lease); err != nil {
		return CreateResult{}, err
	}
	// After the lease: only the owner's view of the signer's spending is kept warm.
	reservation, err := uc.funds.Reserve(ctx, req.Signer, req.SignerHex, req.Intent, gasLimit)
	if err != nil {
		return uc.adoptInstead(ctx, req, approval, err)
	}
	allocated := false
	defer func() {
		if !allocated {
			// A panic before the writer answered: released, or the signer would keep its
			// cost until the process ends. Had the writer taken the create, its own
			// settling comes second and is ignored.
			reservation.Release()
		}
	}()
	req.Admission = uc.admission(ctx, req, reservation)
	if approval != nil {
		req.Admission.Credential, req.Admission.ApprovalID = approval.Requester, approval.ID
	}
	tx, created, err := uc.queue.Allocate(ctx, req, gasLimit, reservation.settleBy)
	allocated = true
	if err != nil {
		return CreateResult{Tx: tx}, err
	}
	return uc.answer(ctx, tx, created)
}

// admission is what the writer checks the spending policies against besides the intent.
func (uc *CreateTxUseCase) admission(ctx context.Context, req domain.CreateRequest, reservation *Reservation) domain.Admission {
	a := domain.Admission{FeeCapPerGas: req.Intent.MaxFeePerGas, RemainingAfter: reservation.Remaining(), DataFeeBound: reservation.DataFee()}
	if a.FeeCapPerGas == nil {
		a.FeeCapPerGas = uc.cfg.FeeCap
	}
	if p, ok := domain.PrincipalFrom(ctx); ok {
		a.Credential = p.ID
	}
	return a
}

// blockGasCheckAbove: intents asking for more gas than this are checked against the latest
// block's gas limit before a nonce; smaller ones (transfers, most calls) fit every chain's
// blocks and cost no look-up.
const blockGasCheckAbove = 1_000_000

// fitsInABlock refuses a gas limit above the latest block's: no block could hold the
// transaction, and a node refuses it (or, given a nonce, holds up the signer until it is
// cancelled). When the chain cannot be asked the create goes on: the broadcast's answer
// covers it.
func (uc *CreateTxUseCase) fitsInABlock(ctx context.Context, gasLimit uint64) error {
	if gasLimit <= blockGasCheckAbove {
		return nil
	}
	fees, err := uc.chain.SuggestFees(ctx)
	if err != nil {
		return nil //nolint:nilerr // not knowing the block's limit is no reason to refuse: the node's answer covers it
	}
	if fees.BlockGasLimit == 0 || gasLimit <= fees.BlockGasLimit {
		return nil
	}
	return &domain.ValidationError{Field: "gasLimit", Reason: fmt.Sprintf("%d is above the latest block's gas limit %d: no block can hold it", gasLimit, fees.BlockGasLimit)}
}

func (uc *CreateTxUseCase) gasLimit(ctx context.Context, req domain.CreateRequest) (uint64, error) {
	given := req.Intent.GasLimit
	if given == 0 && !uc.cfg.EstimateGas {
		return 0, &domain.ValidationError{Field: "gasLimit", Reason: "required (gas estimation is disabled)"}
	}
	if !uc.asksChainFirst(req) {
		return given, nil
	}
	call := CallRequest{
		From:                 req.Signer,
		To:                   req.Intent.To,
		Value:                req.Intent.Value,
		Data:                 req.Intent.Data,
		Gas:                  given,
		MaxFeePerGas:         req.Intent.MaxFeePerGas,
		MaxPriorityFeePerGas: req.Intent.MaxPriorityFeePerGas,
	}
	estimate, err := uc.chain.EstimateGas(ctx, call)
	if errors.Is(err, ErrGasCapped) {
		if err := uc.explainCappedEstimate(ctx, call, err); err != nil {
			return 0, err
		}
	}
	if errors.Is(err, ErrExecutionReverted) {
		return 0, fmt.Errorf("%w: %v", domain.ErrIntentReverts, err) //nolint:errorlint // the node's message is kept; its chain error is not part of the domain error
	}
	if errors.Is(err, ErrInsufficientFunds) {
		return 0, fmt.Errorf("%w: %v", domain.ErrInsufficientFunds, err) //nolint:errorlint // as above
	}
	if err != nil {
		return 0, &domain.UnavailableError{Reason: "gas estimation", RetryAfter: time.Second, Err: err}
	}
	if given != 0 {
		return given, nil
	}
	if limit := uc.cfg.Limits.MaxGasLimit; limit != 0 && estimate > limit {
		// Cut to the bound it would run out of gas for certain, spending its nonce and fee.
		return 0, &domain.ValidationError{Field: "gasLimit",
			Reason: fmt.Sprintf("this call needs %d gas by the node's estimate, above the %d this deployment allows a transaction (create.maxGasLimit)", estimate, limit)}
	}
	return PadGasEstimate(estimate, uc.cfg.GasEstimateMultiplier, uc.cfg.Limits.MaxGasLimit), nil
}

// explainCappedEstimate asks again, without the caps the intent put on the estimate (its gas
// limit, and its fee, at which the node allows only the gas the signer's balance pays for),
// when the estimate failed within them: a call that runs without them does not revert, and
// the answer names the cap. nil: the call fails without the caps too, as first answered.
func (uc *CreateTxUseCase) explainCappedEstimate(ctx context.Context, call CallRequest, capped error) error {
	if call.Gas == 0 && call.MaxFeePerGas == nil {
		return nil
	}
	uncapped := call
	uncapped.Gas, uncapped.MaxFeePerGas, uncapped.MaxPriorityFeePerGas = 0, nil, nil
	needs, err := uc.chain.EstimateGas(ctx, uncapped)
	switch {
	case err != nil:
		return nil //nolint:nilerr // the call fails without the caps too: the first answer stands
	case call.Gas != 0 && needs > call.Gas:
		return &domain.ValidationError{Field: "gasLimit", Reason: fmt.Sprintf("%d is below the %d gas this call needs", call.Gas, needs)}
	case call.MaxFeePerGas != nil:
		// The node's message is kept; its chain error is not part of the domain error.
		return fmt.Errorf("%w: the signer's balance cannot pay for the %d gas this call needs at maxFeePerGas %s (the node said: %v)",
			domain.ErrInsufficientFunds, needs, call.MaxFeePerGas, capped) //nolint:errorlint // as said above
	}
	return nil
}

// PadGasEstimate is the gas limit for an estimate: padded by multiplier for state that moves
// between the estimate and the block, at most maxGasLimit, and not padded past EIP-7825's
// cap on a transaction's gas (2^24) when the estimate is within it: on a chain that
// enforces the cap, every node refuses a transaction above it, so the padding would turn a
// call that fits into one that is never mined.
func PadGasEstimate(estimate uint64, multiplier float64, maxGasLimit uint64) uint64 {
	padded := uint64(math.Ceil(float64(estimate) * max(multiplier, 1)))
	if estimate <= params.MaxTxGas {
		padded = min(padded, params.MaxTxGas)
	}
	return min(padded, maxGasLimit)
}

func createResultLabel(res CreateResult, err error) string {
	switch {
	case err == nil && res.Tx.State == domain.StateAwaitingApproval:
		return "awaiting_approval"
	case err == nil && res.Created:
		return "created"
	case err == nil:
		return "existing"
	case errors.Is(err, domain.ErrIdempotencyConflict):
		return "conflict"
	case errors.Is(err, domain.ErrInvalidArgument), errors.Is(err, domain.ErrUnknownSigner), errors.Is(err, domain.ErrIntentReverts), errors.Is(err, domain.ErrInsufficientFunds):
		return "invalid"
	case errors.Is(err, domain.ErrSignerRetired):
		return "retired"
	case errors.Is(err, domain.ErrSignerPaused):
		return "paused"
	case errors.Is(err, domain.ErrPolicyDenied):
		return "policy_denied"
	case errors.Is(err, domain.ErrSignerUnavailable):
		return "signer_unavailable"
	case errors.Is(err, domain.ErrNotLeader):
		return "not_leader"
	case errors.Is(err, domain.ErrFenced):
		return "fenced"
	case errors.Is(err, domain.ErrUnavailable):
		return "unavailable"
	default:
		return "error"
	}
}

// GetTxUseCase reads transactions.
type GetTxUseCase struct {
	txs TxReader
}

// NewGetTxUseCase wires the use case.
func NewGetTxUseCase(txs TxReader) *GetTxUseCase { return &GetTxUseCase{txs: txs} }

// ByID returns a transaction by its id.
func (uc *GetTxUseCase) ByID(ctx context.Context, id string) (domain.ManagedTx, error) {
	parsed, err := parseTxID(id)
	if err != nil {
		return domain.ManagedTx{}, err
	}
	return uc.txs.GetByID(ctx, parsed)
}

// ByRequestID returns the transaction created for (signer, requestId).
func (uc *GetTxUseCase) ByRequestID(ctx context.Context, signer, requestID string) (domain.ManagedTx, error) {
	addr, err := domain.ParseAddress("signer", signer)
	if err != nil {
		return domain.ManagedTx{}, err
	}
	if requestID == "" {
		return domain.ManagedTx{}, &domain.ValidationError{Field: "requestId", Reason: "required"}
	}
	if _, err := domain.ParseRequestID(requestID, domain.DefaultLimits().MaxRequestIDLength); err != nil {
		return domain.ManagedTx{}, err
	}
	return uc.txs.GetByRequestID(ctx, addr, requestID)
}
