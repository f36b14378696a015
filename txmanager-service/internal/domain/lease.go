package domain

import "time"

// Lease is this node's right to write for a signer, as granted by the database.
type Lease struct {
	Signer string
	Owner  string
	Token  uint64
	// ExpiresAt is the database's expiry time (database clock).
	ExpiresAt time.Time
	// ValidUntil is when this node stops trusting the lease, on its own monotonic clock:
	// the moment the acquiring statement was sent plus the remaining lease time, less the
	// skew allowance. Past it the node stops all work for the signer even if the database
	// has not been asked (local fencing).
	ValidUntil time.Time
}

// LocalDeadline computes ValidUntil for a lease granted by a statement sent at sentAt, whose
// database reported now=dbNow and expiry=expiresAt. Measuring from the moment the statement
// was sent errs on the safe side: the database may have granted it later, never earlier.
func LocalDeadline(sentAt, dbNow, expiresAt time.Time, skew time.Duration) time.Time {
	return sentAt.Add(expiresAt.Sub(dbNow) - skew)
}

// HeldAt reports whether the lease can still be trusted at local time now.
func (l Lease) HeldAt(now time.Time) bool { return now.Before(l.ValidUntil) }

// LeaseSigners is the signer of each lease, in order.
func LeaseSigners(leases []Lease) []string {
	signers := make([]string, len(leases))
	for i, l := range leases {
		signers[i] = l.Signer
	}
	return signers
}
