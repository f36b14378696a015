package services

import (
	"context"
	"math/big"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
)

// TxSigner signs transactions for the managed signers. Adapters (internal/signer): a
// go-ethereum keystore, raw development keys, and a clef-compatible external signer.
// Implementations never log or return key material.
type TxSigner interface {
	// SignTx returns tx signed by from for chainID (London/EIP-1559 signer). A signer the
	// service holds no key for yields an error matching domain.ErrUnknownSigner.
	SignTx(ctx context.Context, from common.Address, tx *types.Transaction, chainID *big.Int) (*types.Transaction, error)
}

// SigningPace is implemented by a TxSigner whose key sources take a limited number of
// signatures at once: clef approves one request after another, so many in flight would
// only queue there, each waiting out the others inside its own deadline. The pipeline sends
// a signer's source no more than MaxInFlight(from) signatures at a time (0: no limit of
// its own).
type SigningPace interface {
	MaxInFlight(from common.Address) int
}
