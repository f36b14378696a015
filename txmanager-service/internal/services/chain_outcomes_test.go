package services_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// Every row of the outcome table, through the same call the broadcaster makes: the node's
// answer (as the classifier wraps it, with the node's own message) and, where the meaning
// depends on it, whose hash the node holds.
func TestOutcomeOfEveryAnswer(t *testing.T) {
	node := func(class error, msg string) error { return fmt.Errorf("%w: %w", class, errors.New(msg)) }
	tests := []struct {
		name      string
		answer    error
		ownership services.Ownership
		want      services.ChainOutcome
	}{
		{"accepted", nil, services.OwnershipNotAsked,
			services.ChainOutcome{SubState: domain.SubStateSubmitted, Next: services.StepAwaitReceipt, Result: "submitted"}},
		{"already known", node(services.ErrKnownTransaction, "already known"), services.OwnershipNotAsked,
			services.ChainOutcome{SubState: domain.SubStateSubmitted, Next: services.StepAwaitReceipt, Result: "known"}},
		{"nonce too low, ours", node(services.ErrNonceTooLow, "nonce too low: next nonce 8, tx nonce 7"), services.OwnershipOurs,
			services.ChainOutcome{SubState: domain.SubStateSubmitted, Next: services.StepAwaitReceipt, Result: "nonce_too_low_ours"}},
		{"nonce too low, foreign", node(services.ErrNonceTooLow, "nonce too low"), services.OwnershipForeign,
			services.ChainOutcome{SubState: domain.SubStateNonceTaken, Next: services.StepSettleNonce, Result: "nonce_taken",
				LastError: "nonce used by a transaction this service did not sign"}},
		{"nonce too low, unchecked", node(services.ErrNonceTooLow, "nonce too low"), services.OwnershipUnchecked,
			services.ChainOutcome{SubState: domain.SubStateBroadcastFailed, Next: services.StepRebroadcast, Result: "error",
				LastError: "nonce too low; our hashes could not be checked"}},
		{"underpriced", node(services.ErrUnderpriced, "replacement transaction underpriced"), services.OwnershipNotAsked,
			services.ChainOutcome{SubState: domain.SubStateUnderpriced, Next: services.StepReprice, Result: "underpriced", KeepNodeMessage: true,
				LastError: "chain: transaction underpriced: replacement transaction underpriced"}},
		{"insufficient funds", node(services.ErrInsufficientFunds, "insufficient funds for gas * price + value"), services.OwnershipNotAsked,
			services.ChainOutcome{SubState: domain.SubStateInsufficientFunds, Next: services.StepWaitForFunds, Result: "insufficient_funds", KeepNodeMessage: true,
				LastError: "chain: insufficient funds: insufficient funds for gas * price + value"}},
		{"nonce gap", node(services.ErrNonceGap, "nonce too high"), services.OwnershipNotAsked,
			services.ChainOutcome{SubState: domain.SubStateNonceGap, Next: services.StepRebroadcast, Result: "nonce_gap", KeepNodeMessage: true,
				LastError: "chain: nonce gap: nonce too high"}},
		{"pool full everywhere", node(services.ErrPoolFull, "txpool is full"), services.OwnershipNotAsked,
			services.ChainOutcome{SubState: domain.SubStatePoolFull, Next: services.StepRebroadcast, Result: "pool_full", KeepNodeMessage: true,
				LastError: "chain: transaction pool full: txpool is full"}},
		{"above the node's fee cap", node(services.ErrAboveNodeFeeCap, "tx fee (1.50 ether) exceeds the configured cap (1.00 ether)"), services.OwnershipNotAsked,
			services.ChainOutcome{SubState: domain.SubStateAboveNodeFeeCap, Next: services.StepHoldFees, Result: "above_node_fee_cap", KeepNodeMessage: true,
				LastError: "chain: fee above the node's cap: tx fee (1.50 ether) exceeds the configured cap (1.00 ether)"}},
		{"not mineable as signed", node(services.ErrNotMineable, "exceeds block gas limit"), services.OwnershipNotAsked,
			services.ChainOutcome{SubState: domain.SubStateNotMineable, Next: services.StepCancel, Result: "not_mineable", KeepNodeMessage: true,
				LastError: "chain: transaction not mineable as signed: exceeds block gas limit"}},
		{"gas limit short of the L1 part", node(services.ErrL1GasShort, "intrinsic gas too low"), services.OwnershipNotAsked,
			services.ChainOutcome{SubState: domain.SubStateL1GasShort, Next: services.StepRebroadcast, Result: "l1_gas_short", KeepNodeMessage: true,
				LastError: "chain: gas limit short of the node's count with its L1 part: intrinsic gas too low"}},
		{"a node answer no class knows", node(services.ErrUnknownAnswer, "the chain is on holiday"), services.OwnershipNotAsked,
			services.ChainOutcome{SubState: domain.SubStateBroadcastFailed, Next: services.StepRebroadcast, Result: services.UnknownAnswerResult, KeepNodeMessage: true,
				LastError: "chain: answer no class knows: the chain is on holiday"}},
		{"unclassified", errors.New("502 bad gateway"), services.OwnershipNotAsked,
			services.ChainOutcome{SubState: domain.SubStateBroadcastFailed, Next: services.StepRebroadcast, Result: "error", KeepNodeMessage: true,
				LastError: "502 bad gateway"}},
	}
	covered := map[string]bool{}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := services.OutcomeOf(tc.answer, tc.ownership); got != tc.want {
				t.Errorf("OutcomeOf = %+v\nwant        %+v", got, tc.want)
			}
			if need := services.NeedsOwnership(tc.answer); need != (tc.ownership != services.OwnershipNotAsked) {
				t.Errorf("NeedsOwnership = %v, want %v", need, !need)
			}
		})
		covered[fmt.Sprint(services.AnswerClassOf(tc.answer), tc.ownership)] = true
	}
	// A row added to the table without a case here fails.
	for _, row := range services.ChainAnswers() {
		if !covered[fmt.Sprint(row.Class, row.Ownership)] {
			t.Errorf("the outcome table's row %v (ownership %d) has no case in this test", row.Class, row.Ownership)
		}
	}
}

func TestIsNodeAnswer(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("%w: nonce too low", services.ErrNonceTooLow), true},
		{fmt.Errorf("%w: x", services.ErrKnownTransaction), true},
		{fmt.Errorf("%w: x", services.ErrUnderpriced), true},
		{fmt.Errorf("%w: x", services.ErrInsufficientFunds), true},
		{fmt.Errorf("%w: x", services.ErrExecutionReverted), true},
		{fmt.Errorf("%w: x", services.ErrNotSupported), true},
		{errors.New("connection refused"), false},
		{fmt.Errorf("%w: all down", services.ErrNoChainEndpoint), false},
	}
	for _, tc := range tests {
		if got := services.IsNodeAnswer(tc.err); got != tc.want {
			t.Errorf("IsNodeAnswer(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// The sub-state an answer records is how its Next step reaches the next resubmission, so a
// sub-state must mean one step: two rows recording the same sub-state with different steps
// would have resubmission do one of them for both.
func TestEverySubStateAnAnswerRecordsMeansOneStep(t *testing.T) {
	steps := map[domain.SubState]services.NextStep{}
	rows := services.ChainAnswers()
	rows = append(rows, services.AnswerRow{Outcome: services.OutcomeOf(errors.New("unclassified"), services.OwnershipNotAsked)})
	for _, row := range rows {
		sub, next := row.Outcome.SubState, row.Outcome.Next
		if seen, ok := steps[sub]; ok && seen != next {
			t.Errorf("sub-state %s is recorded with steps %q and %q", sub, seen, next)
		}
		steps[sub] = next
		if !slices.Contains(domain.StoredSubStates(), sub) {
			t.Errorf("row %v records sub-state %s, which domain.StoredSubStates (and so the database) does not accept", row.Class, sub)
		}
		if got := services.StepAfter(sub); got != next {
			t.Errorf("StepAfter(%s) = %q, want %q, the row's step", sub, got, next)
		}
		if !slices.Contains(services.Steps(), next) {
			t.Errorf("row %v's step %q is not among services.Steps()", row.Class, next)
		}
	}
	// Sub-states no answer records are written once the node holds the transaction (or
	// by the stages after it): they await their receipt.
	for _, sub := range domain.StoredSubStates() {
		if _, recorded := steps[sub]; !recorded {
			if got := services.StepAfter(sub); got != services.StepAwaitReceipt {
				t.Errorf("StepAfter(%s) = %q, want %q", sub, got, services.StepAwaitReceipt)
			}
		}
	}
}
