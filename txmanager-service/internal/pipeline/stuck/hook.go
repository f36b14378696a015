// Package stuck is the pipeline stage for a head of line that does not move: a signer's
// lowest unmined transaction past the thresholds (age, attempts) goes to the Hook, whose
// decision (NOOP, CANCEL, REPLACE, PLACEHOLDER) is claimed fenced and audited before
// anything is signed or sent. Operators resolve one transaction through the admin API
// with the same path.
package stuck

import (
	"context"
	"fmt"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// Case is what a hook sees of a stuck transaction.
type Case struct {
	Signer         string
	TxID           uuid.UUID
	Nonce          uint64
	TxHash         *common.Hash
	State          domain.State
	SubmitAttempts int
	LastError      string
	Age            time.Duration
	PendingDepth   int
	// Manual is true when an operator asked for the resolution through the admin API.
	Manual bool
}

// Decision is a hook's answer.
type Decision struct {
	Action domain.ResolutionAction
	// Reason is recorded in the audit trail and the logs.
	Reason string
}

// Hook decides what to do about a stuck head-of-line transaction. It may be called again
// for the same transaction; the stage claims (fenced) before acting, so a repeated decision
// never doubles a chain side effect. A service embedding its own policy provides its own
// Hook in place of PolicyHook.
type Hook interface {
	Decide(ctx context.Context, stuck Case) (Decision, error)
}

// PolicyHook always answers with one configured action (NOOP by default).
type PolicyHook struct {
	Action domain.ResolutionAction
}

// Decide implements Hook.
func (h PolicyHook) Decide(_ context.Context, stuck Case) (Decision, error) {
	action := h.Action
	if action == "" {
		action = domain.ActionNoop
	}
	return Decision{Action: action, Reason: fmt.Sprintf("policy %s: head of line for %s after %d attempts", action, stuck.Age.Round(time.Second), stuck.SubmitAttempts)}, nil
}
