package pipeline

import (
	"math/big"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"
)

// AttemptKind says what a signed attempt is for.
type AttemptKind string

const (
	// AttemptOriginal carries the client's intent.
	AttemptOriginal AttemptKind = "ORIGINAL"
	// AttemptReplace carries the same intent with bumped fees.
	AttemptReplace AttemptKind = "REPLACE"
	// AttemptCancel is a 0-value self-transfer that consumes the nonce instead.
	AttemptCancel AttemptKind = "CANCEL"
	// AttemptPlaceholder is a 0-value self-transfer that fills the nonce.
	AttemptPlaceholder AttemptKind = "PLACEHOLDER"
)

// ExecutesIntent reports whether a mined attempt of this kind ran the client's intent.
func (k AttemptKind) ExecutesIntent() bool {
	return k == AttemptOriginal || k == AttemptReplace || k == ""
}

// SignedAttempt is one signed raw transaction for a managed transaction's nonce.
type SignedAttempt struct {
	TxID   uuid.UUID
	Hash   common.Hash
	Nonce  uint64
	Kind   AttemptKind
	MaxFee *big.Int
	MaxTip *big.Int
	// BaseFee is the base fee the attempt was priced against (nil: not known).
	BaseFee  *big.Int
	GasLimit uint64
	Raw      []byte
}

// AttemptRef names an attempt to look a receipt up for.
type AttemptRef struct {
	Hash common.Hash
	Kind AttemptKind
}

// TrackedTx is broadcast and not yet mined: what the receipt checker follows.
type TrackedTx struct {
	TxID     uuid.UUID
	Signer   string
	Nonce    uint64
	Attempts []AttemptRef
}

// Tracked is the attempts as the receipt checker follows them once they are stored.
func Tracked(signer string, attempts []SignedAttempt) []TrackedTx {
	out := make([]TrackedTx, len(attempts))
	for i, a := range attempts {
		out[i] = TrackedTx{TxID: a.TxID, Signer: signer, Nonce: a.Nonce, Attempts: []AttemptRef{{Hash: a.Hash, Kind: a.Kind}}}
	}
	return out
}

// OrZero is v, or zero when it is nil (a fee or value that was not given).
func OrZero(v *big.Int) *big.Int {
	if v == nil {
		return new(big.Int)
	}
	return v
}
