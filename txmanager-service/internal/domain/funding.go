package domain

import (
	"fmt"
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"
)

// Funding is a signer's low- and high-water marks and, optionally, the treasury signer that
// refills it.
type Funding struct {
	ChainID   uint64
	Signer    common.Address
	LowWater  *big.Int
	HighWater *big.Int
	// Treasury sends a low signer up to HighWater (nil: no refill, the events alone).
	Treasury *common.Address
	// Low: the balance fell under LowWater and has not reached HighWater since.
	Low         bool
	LastBalance *big.Int
	RefillTxID  *uuid.UUID
	Refills     int64
	UpdatedAt   time.Time
	UpdatedBy   string
}

// ParseFunding validates an operator's funding marks.
func ParseFunding(signer, lowWater, highWater, treasury string) (Funding, error) {
	var f Funding
	var err error
	if f.Signer, err = ParseAddress("signer", signer); err != nil {
		return f, err
	}
	if f.LowWater, err = ParseWei("lowWater", lowWater); err != nil {
		return f, err
	}
	if f.HighWater, err = ParseWei("highWater", highWater); err != nil {
		return f, err
	}
	if f.HighWater.Cmp(f.LowWater) <= 0 {
		return f, invalid("highWater", "must be above lowWater (%s wei): the gap keeps a balance at one mark from firing at every look", f.LowWater)
	}
	if treasury != "" {
		t, err := ParseAddress("treasury", treasury)
		if err != nil {
			return f, err
		}
		if t == f.Signer {
			return f, invalid("treasury", "a signer cannot refill itself")
		}
		f.Treasury = &t
	}
	return f, nil
}

// RefillRequestID is the request id of a signer's n-th refill: every node asking for it
// names the same request, so it is sent once.
func RefillRequestID(signer common.Address, n int64) string {
	return fmt.Sprintf("refill-%s-%d", signer.Hex(), n)
}
