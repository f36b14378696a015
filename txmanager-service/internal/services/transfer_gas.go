package services

import (
	"context"
	"math/big"

	"github.com/ethereum/go-ethereum/common"
)

// GasEstimator runs eth_estimateGas.
type GasEstimator interface {
	EstimateGas(ctx context.Context, call CallRequest) (uint64, error)
}

// PlainTransferGas is a plain transfer's gas on Ethereum and most chains.
const PlainTransferGas = 21_000

// TransferGas is the gas limit for a plain transfer of 0 wei from one account to another:
// what a cancellation, a placeholder and a refill send. On most chains that is 21,000; a
// chain that charges more for it (Arbitrum counts its L1 cost in gas, and refuses 21,000 as
// "intrinsic gas too low") gets the node's estimate, padded by a fifth for the L1 price to
// rise before it is mined. A failed estimate falls back to 21,000.
func TransferGas(ctx context.Context, chain GasEstimator, from, to common.Address) uint64 {
	estimate, err := chain.EstimateGas(ctx, CallRequest{From: from, To: &to, Value: new(big.Int)})
	if err != nil || estimate <= PlainTransferGas {
		return PlainTransferGas
	}
	return estimate + estimate/5
}
