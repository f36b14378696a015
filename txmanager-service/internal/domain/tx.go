package domain

import (
	"math/big"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"
)

// ManagedTx is the aggregate: one intent, one nonce, its state machine and final evidence.
type ManagedTx struct {
	ID uuid.UUID
	// ChainID is the chain the transaction is for; with the signer it keys the nonce.
	ChainID uint64
	Signer  common.Address
	// SignerHex is Signer in EIP-55 form when known, saving a keccak hash per use.
	SignerHex   string
	RequestID   string
	Fingerprint [32]byte
	Nonce       uint64
	Intent      Intent
	// EffectiveGasLimit is the gas limit used for signing: the client's, or the estimate.
	EffectiveGasLimit uint64

	State          State
	SubState       SubState
	TxHash         *common.Hash
	SubmitAttempts int
	LastError      string
	LastSubmitAt   *time.Time
	NextResubmitAt *time.Time

	Receipt     *ReceiptSummary
	ConfirmedAt *time.Time

	FencingToken uint64
	CreatedAt    time.Time
	UpdatedAt    time.Time

	// RecoveredAt is set on a transaction recovered from the chain after the database lost
	// it; a retried create with the same intent adopted it (RequestID) or may still adopt it
	// until UnclaimedUntil.
	RecoveredAt    *time.Time
	UnclaimedUntil *time.Time
}

// ReceiptSummary is the minimal evidence kept of a mined transaction, and what it cost.
type ReceiptSummary struct {
	TxHash      common.Hash
	Status      uint64
	BlockNumber uint64
	BlockHash   common.Hash
	GasUsed     uint64
	// EffectiveGasPrice is the price per gas the signer paid (nil: the node did not say).
	EffectiveGasPrice *big.Int
	// L1Fee is the L1 data fee of an OP-stack chain (nil: none, or the node did not say).
	L1Fee *big.Int
}

// Fee is what the transaction cost its signer in wei: gas used at the effective price,
// plus the L1 data fee. Nil when the node did not give the effective price.
func (r ReceiptSummary) Fee() *big.Int {
	if r.EffectiveGasPrice == nil {
		return nil
	}
	fee := new(big.Int).Mul(new(big.Int).SetUint64(r.GasUsed), r.EffectiveGasPrice)
	if r.L1Fee != nil {
		fee.Add(fee, r.L1Fee)
	}
	return fee
}

// SignerText is the signer in EIP-55 form.
func (tx ManagedTx) SignerText() string {
	if tx.SignerHex != "" {
		return tx.SignerHex
	}
	return tx.Signer.Hex()
}

// ToText is the recipient in EIP-55 form, "" for contract creation.
func (i Intent) ToText() string {
	switch {
	case i.To == nil:
		return ""
	case i.ToHex != "":
		return i.ToHex
	default:
		return i.To.Hex()
	}
}
