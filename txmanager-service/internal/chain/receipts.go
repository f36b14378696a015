package chain

import (
	"context"
	"errors"
	"fmt"
	"math/big"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/bionicotaku/txmanager-service/internal/services"
)

// rpcReceipt decodes only the receipt fields the service stores. types.Receipt insists on
// fields (logs bloom, cumulative gas) that some non-geth nodes and L2s shape differently.
type rpcReceipt struct {
	TxHash            common.Hash     `json:"transactionHash"`
	Status            *hexutil.Uint64 `json:"status"`
	BlockNumber       *hexutil.Big    `json:"blockNumber"`
	BlockHash         *common.Hash    `json:"blockHash"`
	TransactionIndex  hexutil.Uint    `json:"transactionIndex"`
	GasUsed           hexutil.Uint64  `json:"gasUsed"`
	EffectiveGasPrice *hexutil.Big    `json:"effectiveGasPrice"`
	ContractAddress   *common.Address `json:"contractAddress"`
}

var errReceiptWithoutStatus = errors.New("receipt has no status field (pre-Byzantium chain?)")

// TransactionReceipts implements services.Chain with batched eth_getTransactionReceipt.
func (c *RPCChain) TransactionReceipts(ctx context.Context, hashes []common.Hash) ([]services.ReceiptResult, error) {
	if len(hashes) == 0 {
		return nil, nil
	}
	decoded := make([]*rpcReceipt, len(hashes))
	elems := make([]rpc.BatchElem, len(hashes))
	for i, hash := range hashes {
		elems[i] = rpc.BatchElem{
			Method: "eth_getTransactionReceipt",
			Args:   []any{hash},
			Result: &decoded[i],
		}
	}
	if err := c.batchCall(ctx, elems); err != nil {
		return nil, err
	}
	results := make([]services.ReceiptResult, len(hashes))
	for i, elem := range elems {
		if elem.Error != nil {
			results[i].Err = fmt.Errorf("receipt of %s: %w", hashes[i], elem.Error)
			continue
		}
		receipt, err := decoded[i].toReceipt()
		if err != nil {
			results[i].Err = fmt.Errorf("receipt of %s: %w", hashes[i], err)
			continue
		}
		results[i].Receipt = receipt
	}
	return results, nil
}

// toReceipt returns nil for a null result and for a receipt not yet in a block: some nodes
// answer for pending transactions with a null block hash, which is not a receipt the
// service can act on.
func (r *rpcReceipt) toReceipt() (*services.Receipt, error) {
	if r == nil || r.BlockHash == nil || r.BlockNumber == nil {
		return nil, nil
	}
	if r.Status == nil {
		return nil, errReceiptWithoutStatus
	}
	receipt := &services.Receipt{
		TxHash:           r.TxHash,
		Status:           uint64(*r.Status),
		BlockNumber:      (*big.Int)(r.BlockNumber).Uint64(),
		BlockHash:        *r.BlockHash,
		TransactionIndex: uint(r.TransactionIndex),
		GasUsed:          uint64(r.GasUsed),
		ContractAddress:  r.ContractAddress,
	}
	if r.EffectiveGasPrice != nil {
		receipt.EffectiveGasPrice = (*big.Int)(r.EffectiveGasPrice)
	}
	return receipt, nil
}
