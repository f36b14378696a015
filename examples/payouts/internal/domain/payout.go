// Package domain holds what a payout is, its states and the rules for accepting one. No I/O.
package domain

import (
	"time"

	"github.com/google/uuid"
)

// Status is where a payout stands.
type Status string

const (
	// StatusPending: accepted and in the outbox, not yet handed to txmanager.
	StatusPending Status = "PENDING"
	// StatusSubmitted: txmanager holds a transaction for it (TxID is known).
	StatusSubmitted Status = "SUBMITTED"
	// StatusPaid: the transaction is CONFIRMED on chain.
	StatusPaid Status = "PAID"
	// StatusFailed: the transaction ended FAILED_FINAL, or txmanager refused the intent.
	StatusFailed Status = "FAILED"
)

// Final reports a status no later event changes.
func (s Status) Final() bool { return s == StatusPaid || s == StatusFailed }

// Payout is one payment from the configured signer.
type Payout struct {
	ID             uuid.UUID
	IdempotencyKey string
	To             string
	// AmountWei is a decimal string: uint256 does not fit an int64.
	AmountWei     string
	Status        Status
	TxID          string
	TxHash        string
	FailureReason string
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

// OutboxItem is a payout waiting to be sent to txmanager; its ID is the requestId.
type OutboxItem struct {
	ID        uuid.UUID
	PayoutID  uuid.UUID
	Attempts  int
	To        string
	AmountWei string
}

// Completion is a final result from txmanager's feed, as the payouts service applies it.
type Completion struct {
	TxID   string
	Signer string
	// Confirmed is true for CONFIRMED, false for FAILED_FINAL.
	Confirmed bool
	TxHash    string
	Cursor    string
}

// FinalStatus maps a completion onto the payout's final status and failure reason.
func (c Completion) FinalStatus() (Status, string) {
	if c.Confirmed {
		return StatusPaid, ""
	}
	return StatusFailed, "transaction failed on chain (FAILED_FINAL)"
}
