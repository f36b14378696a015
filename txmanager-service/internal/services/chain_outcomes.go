package services

import (
	"errors"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// What a node's answer to a broadcast means is decided here and nowhere else: one row per
// answer class, giving the sub-state recorded, what the pipeline does next and the metric
// label. The sub-state is how the decision travels: the next resubmission reads it back
// and does what StepAfter says, so a row's Next column is what happens, not a comment.
// The chain adapter's classifier (internal/chain/classify.go) reads the class from the
// node's message. A new class of node error is a sentinel and a row here, its phrases
// there, its sub-state in domain and, if its step is a new one, the resubmission's
// reaction to that step (pipeline/submitting).

// Answer classes of a broadcast: errors.Is matches them on what Chain.SendRawTransactions
// returns per transaction.
var (
	ErrKnownTransaction  = errors.New("chain: transaction already known")
	ErrNonceTooLow       = errors.New("chain: nonce too low")
	ErrUnderpriced       = errors.New("chain: transaction underpriced")
	ErrInsufficientFunds = errors.New("chain: insufficient funds")
	// ErrNonceGap: the node keeps no transaction above a missing nonce (most nodes queue
	// it; blob pools, anvil and some providers refuse).
	ErrNonceGap = errors.New("chain: nonce gap")
	// ErrPoolFull: the node's pool has no room. It says nothing about the transaction:
	// another endpoint is tried before it counts as the answer.
	ErrPoolFull = errors.New("chain: transaction pool full")
	// ErrAboveNodeFeeCap: the node's own limit on gas limit x fee cap (go-ethereum's
	// --rpc.txfeecap, 1 ether by default) refused the transaction.
	ErrAboveNodeFeeCap = errors.New("chain: fee above the node's cap")
	// ErrNotMineable: no node takes the transaction as signed: its gas limit is below its
	// intrinsic cost or above the block's (or the per-transaction) limit, or it is larger
	// than pools accept.
	ErrNotMineable = errors.New("chain: transaction not mineable as signed")
	// ErrL1GasShort: the node refused the gas limit as below the intrinsic cost while it
	// covers what the EVM itself charges before the transaction runs. Arbitrum counts the L1
	// part of a transaction's cost as gas and refuses a limit short of it in the same words;
	// that part follows the L1 price, so the same bytes may be taken later.
	ErrL1GasShort = errors.New("chain: gas limit short of the node's count with its L1 part")
	// ErrUnknownAnswer is a node's own answer (a JSON-RPC error) in words no phrase of the
	// classifier knows: never final, rebroadcast like a failed send, counted apart so that
	// an alert asks for its phrase to be classified (docs/chains.md).
	ErrUnknownAnswer = errors.New("chain: answer no class knows")
)

// NextStep is what happens to a transaction after an answer.
type NextStep string

// The steps. Receipts follow every transaction the node may hold; what each step adds is
// what the next resubmission (pipeline/submitting) does with the fees, keyed on the
// sub-state recorded (StepAfter).
const (
	// StepAwaitReceipt: the node holds the transaction; receipts and finality follow it. If
	// it is not mined within the resubmit interval it goes out again, re-priced when the
	// market has risen above its fees.
	StepAwaitReceipt NextStep = "await receipt"
	// StepRebroadcast: no node took it; it goes out again when the resubmit interval has
	// passed, re-priced when the market has risen above its fees.
	StepRebroadcast NextStep = "rebroadcast after the resubmit interval"
	// StepReprice: the node refused its price. The next resubmission sends a replacement
	// that outbids it (at least the bump above it, the market's price when higher, within
	// the caps), even when the market has not moved.
	StepReprice NextStep = "outbid at the next resubmission"
	// StepWaitForFunds: the signer cannot pay. The same bytes go out at each resubmit
	// interval until it can: raising the fees would only make it pay more.
	StepWaitForFunds NextStep = "rebroadcast unchanged until the signer can pay"
	// StepSettleNonce: reconciliation finds what holds the nonce on chain and settles the
	// transaction (recognised as ours, or failed when another transaction took it for good).
	// Resubmission sends the same bytes meanwhile: a replacement would pay for a nonce that
	// may not be ours to use.
	StepSettleNonce NextStep = "reconciliation settles the nonce"
	// StepHoldFees: the node refuses fees this high. The same bytes go out at each
	// resubmit interval (another endpoint may have a higher cap) and no replacement raises
	// them; past the stuck thresholds the head of line goes to the stuck hook.
	StepHoldFees NextStep = "rebroadcast unchanged, never raised above the node's cap"
	// StepCancel: the transaction can never be mined as signed. Once it heads its
	// signer's line (lower nonces mined) a cancellation takes its nonce, so the nonces
	// after it are not held up, and it ends FAILED_FINAL with the node's reason.
	StepCancel NextStep = "cancelled once it heads the line"
)

// Steps lists every step, in the order declared.
func Steps() []NextStep {
	return []NextStep{StepAwaitReceipt, StepRebroadcast, StepReprice, StepWaitForFunds, StepSettleNonce, StepHoldFees, StepCancel}
}

// Ownership is what the node says of our own hashes for a transaction's nonce: asked only
// for answers whose meaning depends on it (nonce too low).
type Ownership int

const (
	// OwnershipNotAsked: the answer's meaning does not depend on it.
	OwnershipNotAsked Ownership = iota
	// OwnershipOurs: the node knows one of our hashes for the nonce.
	OwnershipOurs
	// OwnershipForeign: the node knows none of them; some other transaction has the nonce.
	OwnershipForeign
	// OwnershipUnchecked: the node could not be asked.
	OwnershipUnchecked
)

// ChainOutcome is what an answer means for one transaction.
type ChainOutcome struct {
	SubState domain.SubState
	Next     NextStep
	// Result is the label of tx_submit_total and resubmit_total.
	Result string
	// LastError is recorded as the transaction's last error; KeepNodeMessage records the
	// node's own message instead (its nonces and balances are the operator's clue).
	LastError       string
	KeepNodeMessage bool
}

// chainAnswer is one row: an answer class (nil: accepted), the ownership it applies to, and
// its meaning.
type chainAnswer struct {
	class     error
	ownership Ownership
	outcome   ChainOutcome
}

// chainAnswers is the table. Classes are matched in order with errors.Is.
var chainAnswers = []chainAnswer{
	{nil, OwnershipNotAsked, ChainOutcome{SubState: domain.SubStateSubmitted, Next: StepAwaitReceipt, Result: "submitted"}},
	{ErrKnownTransaction, OwnershipNotAsked, ChainOutcome{SubState: domain.SubStateSubmitted, Next: StepAwaitReceipt, Result: "known"}},
	// "nonce too low" after a lost response is settled by comparing hashes with what the
	// node has, never guessed.
	{ErrNonceTooLow, OwnershipOurs, ChainOutcome{SubState: domain.SubStateSubmitted, Next: StepAwaitReceipt, Result: "nonce_too_low_ours"}},
	{ErrNonceTooLow, OwnershipForeign, ChainOutcome{SubState: domain.SubStateNonceTaken, Next: StepSettleNonce, Result: "nonce_taken",
		LastError: "nonce used by a transaction this service did not sign"}},
	{ErrNonceTooLow, OwnershipUnchecked, ChainOutcome{SubState: domain.SubStateBroadcastFailed, Next: StepRebroadcast, Result: "error",
		LastError: "nonce too low; our hashes could not be checked"}},
	{ErrUnderpriced, OwnershipNotAsked, ChainOutcome{SubState: domain.SubStateUnderpriced, Next: StepReprice, Result: "underpriced", KeepNodeMessage: true}},
	{ErrInsufficientFunds, OwnershipNotAsked, ChainOutcome{SubState: domain.SubStateInsufficientFunds, Next: StepWaitForFunds, Result: "insufficient_funds", KeepNodeMessage: true}},
	// The lower nonces go out first at every resubmission; a nonce nothing of ours holds is
	// found by hole detection and filled.
	{ErrNonceGap, OwnershipNotAsked, ChainOutcome{SubState: domain.SubStateNonceGap, Next: StepRebroadcast, Result: "nonce_gap", KeepNodeMessage: true}},
	// Only when every endpoint answered so (the broadcast tries the others first).
	{ErrPoolFull, OwnershipNotAsked, ChainOutcome{SubState: domain.SubStatePoolFull, Next: StepRebroadcast, Result: "pool_full", KeepNodeMessage: true}},
	{ErrAboveNodeFeeCap, OwnershipNotAsked, ChainOutcome{SubState: domain.SubStateAboveNodeFeeCap, Next: StepHoldFees, Result: "above_node_fee_cap", KeepNodeMessage: true}},
	{ErrNotMineable, OwnershipNotAsked, ChainOutcome{SubState: domain.SubStateNotMineable, Next: StepCancel, Result: "not_mineable", KeepNodeMessage: true}},
	// Not cancelled at once: the L1 price may fall. A head of line still short past the
	// stuck thresholds is cancelled whatever the stuck hook says (pipeline/stuck).
	{ErrL1GasShort, OwnershipNotAsked, ChainOutcome{SubState: domain.SubStateL1GasShort, Next: StepRebroadcast, Result: "l1_gas_short", KeepNodeMessage: true}},
	{ErrUnknownAnswer, OwnershipNotAsked, ChainOutcome{SubState: domain.SubStateBroadcastFailed, Next: StepRebroadcast, Result: UnknownAnswerResult, KeepNodeMessage: true}},
}

// UnknownAnswerResult is the metric label of an answer no class knows; an alert watches it.
const UnknownAnswerResult = telemetry.UnknownAnswerResult

// unclassifiedAnswer is any other failure: the node could not be reached, or answered
// with something that is not a JSON-RPC error.
var unclassifiedAnswer = ChainOutcome{SubState: domain.SubStateBroadcastFailed, Next: StepRebroadcast, Result: "error", KeepNodeMessage: true}

// StepAfter is the step a transaction whose last answer recorded sub is on: the Next of the
// table's rows that record sub. Sub-states no answer records (written by signing,
// re-pricing, receipts or reconciliation) await their receipt.
func StepAfter(sub domain.SubState) NextStep {
	for _, row := range chainAnswers {
		if row.outcome.SubState == sub {
			return row.outcome.Next
		}
	}
	if sub == unclassifiedAnswer.SubState {
		return unclassifiedAnswer.Next
	}
	return StepAwaitReceipt
}

// NeedsOwnership reports whether the meaning of sendErr depends on whether the node knows
// one of our hashes for the nonce.
func NeedsOwnership(sendErr error) bool {
	if sendErr == nil {
		return false
	}
	for _, row := range chainAnswers {
		if row.class != nil && row.ownership != OwnershipNotAsked && errors.Is(sendErr, row.class) {
			return true
		}
	}
	return false
}

// OutcomeOf is what sendErr (nil: accepted) means, given ownership for the classes that
// need it (NeedsOwnership).
func OutcomeOf(sendErr error, ownership Ownership) ChainOutcome {
	for _, row := range chainAnswers {
		matches := (sendErr == nil && row.class == nil) || (sendErr != nil && row.class != nil && errors.Is(sendErr, row.class))
		if !matches || (row.ownership != OwnershipNotAsked && row.ownership != ownership) {
			continue
		}
		out := row.outcome
		if out.KeepNodeMessage {
			out.LastError = sendErr.Error()
		}
		return out
	}
	out := unclassifiedAnswer
	if sendErr != nil {
		out.LastError = sendErr.Error()
	}
	return out
}

// IsNodeAnswer reports whether err is a node's answer about the request (another endpoint
// would answer the same) rather than a failure to reach the node.
func IsNodeAnswer(err error) bool {
	for _, row := range chainAnswers {
		if row.class != nil && errors.Is(err, row.class) {
			return true
		}
	}
	return errors.Is(err, ErrExecutionReverted) || errors.Is(err, ErrNotSupported)
}

// AnswerRow is one row of the outcome table as its tests and the classifier's see it.
type AnswerRow struct {
	// Class is the answer class (nil: accepted).
	Class     error
	Ownership Ownership
	Outcome   ChainOutcome
}

// ChainAnswers lists the table's rows.
func ChainAnswers() []AnswerRow {
	out := make([]AnswerRow, len(chainAnswers))
	for i, row := range chainAnswers {
		out[i] = AnswerRow{Class: row.class, Ownership: row.ownership, Outcome: row.outcome}
	}
	return out
}

// AnswerClassOf is the class of the table that err matches: nil for nil (accepted) and for
// an unclassified error.
func AnswerClassOf(err error) error {
	for _, row := range chainAnswers {
		if row.class != nil && errors.Is(err, row.class) {
			return row.class
		}
	}
	return nil
}
