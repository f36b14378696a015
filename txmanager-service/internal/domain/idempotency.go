package domain

import "fmt"

// ReplayOf is how a create whose requestId is on record with tx is answered: as a replay
// of tx when it carries the same intent (fingerprint), as an idempotency conflict when it
// carries another. A requestId names one intent for good.
func ReplayOf(tx ManagedTx, fingerprint [32]byte, requestID string) error {
	if tx.Fingerprint != fingerprint {
		return fmt.Errorf("%w: requestId %q", ErrIdempotencyConflict, requestID)
	}
	return nil
}
