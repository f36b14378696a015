package domain

import (
	"slices"
	"strings"
)

// ResolutionAction is what to do about a stuck transaction
// (docs/design.md#stuck-detection-and-resolution).
type ResolutionAction string

const (
	// ActionNoop changes nothing on chain: the transaction is marked STUCK and alerted on.
	ActionNoop ResolutionAction = "NOOP"
	// ActionCancel consumes the nonce with a 0-value self-transfer; the intent is dropped.
	ActionCancel ResolutionAction = "CANCEL"
	// ActionReplace sends the same intent with fees that clear the replacement rule.
	ActionReplace ResolutionAction = "REPLACE"
	// ActionPlaceholder fills the nonce with a 0-value self-transfer.
	ActionPlaceholder ResolutionAction = "PLACEHOLDER"
)

// ResolutionActions lists every action.
func ResolutionActions() []ResolutionAction {
	return []ResolutionAction{ActionNoop, ActionCancel, ActionReplace, ActionPlaceholder}
}

// ParseResolutionAction accepts the action names case-insensitively.
func ParseResolutionAction(s string) (ResolutionAction, error) {
	a := ResolutionAction(strings.ToUpper(strings.TrimSpace(s)))
	if !slices.Contains(ResolutionActions(), a) {
		return "", invalid("action", "must be NOOP, CANCEL, REPLACE or PLACEHOLDER")
	}
	return a, nil
}
