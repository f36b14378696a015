package domain

import "slices"

// SubState is the detail under a transaction's state: what the stage that wrote the row
// last found (docs/design.md#states). These are every sub-state the service writes; the
// database accepts no other (its CHECK on managed_tx.sub_state is made from
// StoredSubStates by the migrator).
type SubState string

// Sub-states written by the submitting stage and the broadcaster (what a node's answer
// means is services' outcome table).
const (
	// SubStateSigned: the signed attempt is stored and on its way to the node.
	SubStateSigned SubState = "SIGNED"
	// SubStateSubmitted: the node holds the transaction.
	SubStateSubmitted SubState = "SUBMITTED"
	// SubStateBroadcastFailed: no node took it (unreachable, or an answer no class knows);
	// it is broadcast again.
	SubStateBroadcastFailed SubState = "BROADCAST_FAILED"
	// SubStateUnderpriced: the node wants higher fees; the next resubmission re-prices.
	SubStateUnderpriced SubState = "UNDERPRICED"
	// SubStateInsufficientFunds: the signer cannot pay for it now; rebroadcast until it can.
	SubStateInsufficientFunds SubState = "INSUFFICIENT_FUNDS"
	// SubStateNonceTaken: the node says its nonce is used, and none of our hashes is what it
	// knows; reconciliation finds out by whom.
	SubStateNonceTaken SubState = "NONCE_TAKEN"
	// SubStateRecognised: the transaction at its nonce on chain proved to be its own.
	SubStateRecognised SubState = "RECOGNISED"
	// SubStateRepriced: a replacement at the market's fees is its current attempt.
	SubStateRepriced SubState = "REPRICED"
	// SubStateNonceGap: the node refused it for a gap below its nonce (it keeps no future
	// transactions); the lower ones go out first at the next resubmission.
	SubStateNonceGap SubState = "NONCE_GAP"
	// SubStatePoolFull: every endpoint's pool was full; broadcast again later.
	SubStatePoolFull SubState = "POOL_FULL"
	// SubStateAboveNodeFeeCap: the node's own cap on a transaction's fee (gas limit x fee
	// cap) refused it; no replacement goes higher, an operator changes one of the caps.
	SubStateAboveNodeFeeCap SubState = "ABOVE_NODE_FEE_CAP"
	// SubStateNotMineable: no node will take it as signed (gas below its intrinsic cost,
	// above the block's or the per-transaction limit, data over the pool's size); once it
	// heads its signer's line a cancellation takes its nonce.
	SubStateNotMineable SubState = "NOT_MINEABLE"
	// SubStateL1GasShort: its gas limit covers what the EVM charges before it runs, but the
	// node counts more (Arbitrum counts the L1 part of the cost as gas, and that moves with
	// the L1 price); broadcast again at each resubmit interval until it fits, and cancelled
	// at the head of its signer's line past the stuck thresholds.
	SubStateL1GasShort SubState = "L1_GAS_SHORT"
)

// Sub-states written by the receipts stage.
const (
	// SubStateMined: a receipt is recorded; finality waits for enough blocks on top.
	SubStateMined SubState = "MINED"
	// SubStateReorged: its receipt's block left the canonical chain; it awaits a receipt again.
	SubStateReorged SubState = "REORGED"
	// SubStateReverted: final, FAILED_FINAL: mined with status 0.
	SubStateReverted SubState = "REVERTED"
	// SubStateCancelled: final, FAILED_FINAL: the cancellation at its nonce was mined.
	SubStateCancelled SubState = "CANCELLED"
)

// Sub-states written by reconciliation.
const (
	// SubStatePlaceholder: a self-transfer filling a nonce hole.
	SubStatePlaceholder SubState = "PLACEHOLDER"
	// SubStateRecovered: recorded from the chain after the database lost it.
	SubStateRecovered SubState = "RECOVERED"
)

// SubStateSigningFailed: an ALLOCATED transaction whose signer's key source fails (a KMS
// that hangs or refuses, a disabled key); it moves once a signature succeeds. Shown, never
// stored: the signer's signing record says it for all its waiting transactions at once.
const SubStateSigningFailed SubState = "SIGNING_FAILED"

// SubStateNoop: a head of line marked STUCK for a person to decide (the NOOP action, or
// an action no fee within the caps could carry out).
const SubStateNoop SubState = SubState(ActionNoop)

// SubStateResolving is a transaction whose resolution by action (CANCEL, REPLACE,
// PLACEHOLDER) is claimed and on its way.
func SubStateResolving(action ResolutionAction) SubState {
	return SubState("RESOLVING_" + string(action))
}

// SubStateResolutionSubmitted is a transaction whose resolution attempt by action was
// stored and sent.
func SubStateResolutionSubmitted(action ResolutionAction) SubState {
	return SubState(string(action) + "_SUBMITTED")
}

// StoredSubStates lists every sub-state a row may hold, sorted.
func StoredSubStates() []SubState {
	out := []SubState{
		SubStateSigned, SubStateSubmitted, SubStateBroadcastFailed, SubStateUnderpriced, SubStateInsufficientFunds,
		SubStateNonceTaken, SubStateRecognised, SubStateRepriced, SubStateNonceGap, SubStatePoolFull, SubStateAboveNodeFeeCap, SubStateNotMineable, SubStateL1GasShort, SubStateMined, SubStateReorged, SubStateReverted,
		SubStateCancelled, SubStatePlaceholder, SubStateRecovered, SubStateNoop,
	}
	for _, a := range ResolutionActions() {
		if a != ActionNoop {
			out = append(out, SubStateResolving(a), SubStateResolutionSubmitted(a))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
