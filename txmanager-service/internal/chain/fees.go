package chain

import (
	"context"
	"fmt"
	"math/big"

	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/params"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/bionicotaku/txmanager-service/internal/services"
)

// fallbackTipCap is used where the node has no eth_maxPriorityFeePerGas; 1 gwei is what
// geth's own oracle suggests on an idle chain.
const fallbackTipCap = params.GWei

// SuggestFees implements services.Chain. Both look-ups share one batch request, so a fee
// suggestion costs one round trip.
func (c *RPCChain) SuggestFees(ctx context.Context) (services.FeeSuggestion, error) {
	var (
		latest *rpcHeader
		tipCap *hexutil.Big
	)
	elems := []rpc.BatchElem{
		getBlockHeaderElem("latest", &latest),
		{Method: "eth_maxPriorityFeePerGas", Result: &tipCap},
	}
	if err := c.batchCall(ctx, elems); err != nil {
		return services.FeeSuggestion{}, err
	}
	if err := elems[0].Error; err != nil {
		return services.FeeSuggestion{}, fmt.Errorf("latest block: %w", err)
	}
	baseFee := latest.baseFee()
	if baseFee == nil {
		return services.FeeSuggestion{}, fmt.Errorf("%w: latest block has no base fee (chain without EIP-1559)", services.ErrNotSupported)
	}
	suggestion := services.FeeSuggestion{BaseFee: baseFee}
	switch err := elems[1].Error; {
	case err == nil && tipCap != nil:
		suggestion.TipCap = (*big.Int)(tipCap)
	case err == nil || isNotSupported(err):
		suggestion.TipCap = big.NewInt(fallbackTipCap)
	default:
		return services.FeeSuggestion{}, fmt.Errorf("eth_maxPriorityFeePerGas: %w", err)
	}
	return suggestion, nil
}
