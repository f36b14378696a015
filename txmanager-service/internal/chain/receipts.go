package chain

import (
	"context"
	"errors"
	"fmt"
	"math/big"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/rpc"
	"go.opentelemetry.io/otel/attribute"

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
	// L1Fee is what an OP-stack chain charged for the transaction's data on L1 (op-geth's
	// receipts carry it; other nodes omit it).
	L1Fee *hexutil.Big `json:"l1Fee"`
	// Type is the transaction's type: an OP-stack deposit (0x7e) pays no L1 fee.
	Type hexutil.Uint64 `json:"type"`
}

// opDepositTxType is an OP-stack deposit's transaction type: every OP-stack block begins
// with one, it is never the service's, and it pays no L1 data fee.
const opDepositTxType = 0x7e

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
	if err := throttledBatch(elems); err != nil {
		return nil, err
	}
	results := make([]services.ReceiptResult, len(hashes))
	found := make([]*services.Receipt, len(hashes))
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
		found[i] = receipt
	}
	failed, err := c.fillL1Fees(ctx, found)
	if err != nil {
		return nil, err
	}
	for i, feeErr := range failed {
		if feeErr != nil {
			// That receipt alone is looked up again later; the others of the batch go on.
			results[i] = services.ReceiptResult{Err: fmt.Errorf("receipt of %s: %w", hashes[i], feeErr)}
		}
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
	if r.L1Fee != nil {
		receipt.L1Fee = (*big.Int)(r.L1Fee)
	}
	return receipt, nil
}

// fetchBlockReceipts asks for the receipts of blocks in one batch: itself on an HTTP
// endpoint (receipts_http.go), through the client otherwise. One slice per block (nil: not
// at that height yet) and one error per block; the error returned is the request's.
func (c *RPCChain) fetchBlockReceipts(ctx context.Context, blocks []uint64) ([][]*rpcReceipt, []error, error) {
	if c.blockReceipts != nil {
		return c.blockReceipts.fetch(ctx, blocks)
	}
	decoded := make([][]*rpcReceipt, len(blocks))
	elems := make([]rpc.BatchElem, len(blocks))
	for i, n := range blocks {
		elems[i] = rpc.BatchElem{Method: "eth_getBlockReceipts", Args: []any{hexutil.EncodeUint64(n)}, Result: &decoded[i]}
	}
	if err := c.rpcClient.BatchCallContext(ctx, elems); err != nil {
		return nil, nil, err
	}
	errs := make([]error, len(blocks))
	for i, elem := range elems {
		errs[i] = elem.Error
	}
	return decoded, errs, nil
}

// blockReceiptsPerBatch bounds one batch of eth_getBlockReceipts: a block of a busy chain
// carries thousands of receipts, so a batch of blocks is already a large answer.
const blockReceiptsPerBatch = 8

// BlockReceipts implements services.Chain with batched eth_getBlockReceipts: one call per
// block, however many of its transactions are ours (eth_getTransactionReceipt costs the
// node a search of the whole block for each hash). A block the node does not have yet is
// nil; a node without the method answers ErrNotSupported.
func (c *RPCChain) BlockReceipts(ctx context.Context, numbers []uint64) ([][]services.Receipt, error) {
	if len(numbers) == 0 {
		return nil, nil
	}
	out := make([][]services.Receipt, len(numbers))
	for start := 0; start < len(numbers); start += blockReceiptsPerBatch {
		chunk := numbers[start:min(start+blockReceiptsPerBatch, len(numbers))]
		var decoded [][]*rpcReceipt
		var errs []error
		err := c.send(ctx, "chain.rpc batch eth_getBlockReceipts", "eth_getBlockReceipts", func(ctx context.Context) error {
			var err error
			decoded, errs, err = c.fetchBlockReceipts(ctx, chunk)
			return err
		}, attribute.Int("rpc.batch_size", len(chunk)))
		if err != nil {
			return nil, fmt.Errorf("batch of %d calls to eth_getBlockReceipts: %w", len(chunk), err)
		}
		for i, blockErr := range errs {
			switch {
			case blockErr != nil && isNotSupported(blockErr):
				return nil, fmt.Errorf("eth_getBlockReceipts: %w: %w", services.ErrNotSupported, blockErr)
			case blockErr != nil:
				return nil, fmt.Errorf("receipts of block %d: %w", chunk[i], blockErr)
			case decoded[i] == nil:
				continue // not at that height yet
			}
			receipts := make([]*services.Receipt, 0, len(decoded[i]))
			payL1 := make([]*services.Receipt, 0, len(decoded[i]))
			for _, r := range decoded[i] {
				receipt, err := r.toReceipt()
				if err != nil {
					return nil, fmt.Errorf("receipts of block %d: %w", chunk[i], err)
				}
				if receipt != nil {
					receipts = append(receipts, receipt)
					if r.Type != opDepositTxType {
						payL1 = append(payL1, receipt)
					}
				}
			}
			// Deposits report no L1 fee and owe none: filling theirs cost a raw transaction
			// and the block's L1 prices for every block read.
			failed, err := c.fillL1Fees(ctx, payL1)
			if err == nil {
				err = errors.Join(failed...)
			}
			if err != nil {
				// A fee that may still be had (a node behind a balancer without the raw
				// transaction yet): the block is read again at the next scan.
				return nil, fmt.Errorf("receipts of block %d: %w", chunk[i], err)
			}
			out[start+i] = make([]services.Receipt, len(receipts))
			for j, r := range receipts {
				out[start+i][j] = *r
			}
		}
	}
	return out, nil
}
