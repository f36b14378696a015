package pipeline

import (
	"context"
	"fmt"
	"math/big"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/services"
)

// Unsigned is one attempt's transaction before signing.
type Unsigned struct {
	From           common.Address
	Nonce          uint64
	To             *common.Address
	Value          *big.Int
	Data           []byte
	Gas            uint64
	MaxFee, MaxTip *big.Int
	// Legacy signs a transaction with one gas price (MaxFee) for a chain without a base fee.
	Legacy bool
}

// Signer signs attempts for the chain the pipeline serves.
type Signer struct {
	chainID services.ChainID
	keys    services.TxSigner
}

// NewSigner signs with keys for chainID.
func NewSigner(chainID services.ChainID, keys services.TxSigner) *Signer {
	return &Signer{chainID: chainID, keys: keys}
}

// Sign signs u (EIP-1559, or legacy) as an attempt of kind for the transaction txID.
func (s *Signer) Sign(ctx context.Context, txID uuid.UUID, kind AttemptKind, u Unsigned) (SignedAttempt, error) {
	unsigned := types.NewTx(&types.DynamicFeeTx{
		ChainID: s.chainID.Int, Nonce: u.Nonce, GasTipCap: u.MaxTip, GasFeeCap: u.MaxFee, Gas: u.Gas, To: u.To, Value: u.Value, Data: u.Data,
	})
	if u.Legacy {
		unsigned = types.NewTx(&types.LegacyTx{Nonce: u.Nonce, GasPrice: u.MaxFee, Gas: u.Gas, To: u.To, Value: u.Value, Data: u.Data})
	}
	signed, err := s.keys.SignTx(ctx, u.From, unsigned, s.chainID.Int)
	if err != nil {
		return SignedAttempt{}, err
	}
	raw, err := signed.MarshalBinary()
	if err != nil {
		return SignedAttempt{}, err
	}
	return SignedAttempt{TxID: txID, Hash: signed.Hash(), Nonce: u.Nonce, Kind: kind, MaxFee: u.MaxFee, MaxTip: u.MaxTip, GasLimit: u.Gas, Raw: raw}, nil
}

// Decode reads a signed attempt's transaction back as it was signed: sender, nonce,
// recipient, value, data, gas and type (its fees are the caller's to change).
func (s *Signer) Decode(raw []byte) (Unsigned, error) {
	var tx types.Transaction
	if err := tx.UnmarshalBinary(raw); err != nil {
		return Unsigned{}, fmt.Errorf("decode attempt: %w", err)
	}
	from, err := types.Sender(types.LatestSignerForChainID(s.chainID.Int), &tx)
	if err != nil {
		return Unsigned{}, fmt.Errorf("sender of attempt: %w", err)
	}
	return Unsigned{From: from, Nonce: tx.Nonce(), To: tx.To(), Value: tx.Value(), Data: tx.Data(), Gas: tx.Gas(),
		MaxFee: tx.GasFeeCap(), MaxTip: tx.GasTipCap(), Legacy: tx.Type() == types.LegacyTxType}, nil
}
