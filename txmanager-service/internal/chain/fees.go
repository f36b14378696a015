package chain

import (
	"context"
	"fmt"
	"math/big"
	"slices"

	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/params"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/bionicotaku/txmanager-service/internal/services"
)

// fallbackTipCap is used where the node has no eth_maxPriorityFeePerGas; 1 gwei is what
// geth's own oracle suggests on an idle chain.
const fallbackTipCap = params.GWei

// feeHistoryBlocks and feeHistoryPercentile: the tip that got transactions into the
// last few blocks (the median of each block's 60th-percentile tip) backs up the node's own
// eth_maxPriorityFeePerGas, which some nodes answer with a constant.
const (
	feeHistoryBlocks     = 5
	feeHistoryPercentile = 60
)

// SuggestFees implements services.Chain. Every look-up shares one batch request, so a fee
// suggestion costs one round trip. A latest block without a base fee means a chain
// without EIP-1559: the suggestion is then the node's gas price, for legacy transactions.
func (c *RPCChain) SuggestFees(ctx context.Context) (services.FeeSuggestion, error) {
	var (
		latest   *rpcHeader
		tipCap   *hexutil.Big
		gasPrice *hexutil.Big
		history  feeHistory
	)
	var elems []rpc.BatchElem
	err := c.askHeaders(func(method string) (error, error) {
		elems = []rpc.BatchElem{
			headerElem(method, "latest", &latest),
			{Method: "eth_maxPriorityFeePerGas", Result: &tipCap},
			{Method: "eth_feeHistory", Args: []any{hexutil.Uint64(feeHistoryBlocks), "latest", []float64{feeHistoryPercentile}}, Result: &history},
			{Method: "eth_gasPrice", Result: &gasPrice},
		}
		err := c.batchCall(ctx, elems)
		return elems[0].Error, err
	})
	if err != nil {
		return services.FeeSuggestion{}, err
	}
	if err := elems[0].Error; err != nil {
		return services.FeeSuggestion{}, fmt.Errorf("latest block: %w", err)
	}
	if latest == nil {
		return services.FeeSuggestion{}, fmt.Errorf("latest block: node returned none")
	}
	if latest.baseFee() == nil {
		if err := elems[3].Error; err != nil || gasPrice == nil {
			return services.FeeSuggestion{}, fmt.Errorf("eth_gasPrice on a chain without base fee: %w", errOrNull(err))
		}
		return services.FeeSuggestion{Legacy: true, GasPrice: (*big.Int)(gasPrice), BlockGasLimit: uint64(latest.GasLimit)}, nil
	}
	suggestion := services.FeeSuggestion{BaseFee: latest.baseFee(), BlockGasLimit: uint64(latest.GasLimit)}
	switch err := elems[1].Error; {
	case err == nil && tipCap != nil:
		suggestion.TipCap = (*big.Int)(tipCap)
	case err == nil || isNotSupported(err):
		suggestion.TipCap = big.NewInt(fallbackTipCap)
	default:
		return services.FeeSuggestion{}, fmt.Errorf("eth_maxPriorityFeePerGas: %w", err)
	}
	if elems[2].Error == nil {
		if recent := history.medianTip(); recent != nil && recent.Cmp(suggestion.TipCap) > 0 {
			suggestion.TipCap = recent
		}
	}
	return suggestion, nil
}

// feeHistory is the part of eth_feeHistory's answer used here.
type feeHistory struct {
	Reward [][]*hexutil.Big `json:"reward"`
}

// medianTip is the median over the blocks of the requested percentile tip, or nil when
// the node gave none (empty blocks report zero).
func (h feeHistory) medianTip() *big.Int {
	var tips []*big.Int
	for _, block := range h.Reward {
		if len(block) > 0 && block[0] != nil && (*big.Int)(block[0]).Sign() > 0 {
			tips = append(tips, (*big.Int)(block[0]))
		}
	}
	if len(tips) == 0 {
		return nil
	}
	slices.SortFunc(tips, func(a, b *big.Int) int { return a.Cmp(b) })
	return new(big.Int).Set(tips[len(tips)/2])
}

func errOrNull(err error) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("node answered null")
}
