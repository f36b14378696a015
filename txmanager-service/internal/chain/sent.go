package chain

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"slices"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/bionicotaku/txmanager-service/internal/services"
)

// sentScanBatch is how many blocks one request of the scan fetches.
const sentScanBatch = 25

// rpcBlockTxs is a block with its transactions, each with the sender the node recovered.
type rpcBlockTxs struct {
	Number       hexutil.Uint64    `json:"number"`
	Hash         *common.Hash      `json:"hash"` // null in a pending block
	Transactions []json.RawMessage `json:"transactions"`
}

type rpcTxFrom struct {
	From common.Address `json:"from"`
}

// SentTransactions implements services.Chain: JSON-RPC has no look-up by sender and nonce,
// so the pending block and then the latest blocks are scanned, newest first, until every
// nonce is found, a transaction of the sender older than all of them is met (nonces only
// grow), or maxBlocks blocks were read.
func (c *RPCChain) SentTransactions(ctx context.Context, from common.Address, nonces []uint64, maxBlocks uint64) (map[uint64]services.SentTx, error) {
	found := make(map[uint64]services.SentTx, len(nonces))
	if len(nonces) == 0 {
		return found, nil
	}
	lowest := slices.Min(nonces)
	wanted := make(map[uint64]bool, len(nonces))
	for _, n := range nonces {
		wanted[n] = true
	}
	// The pending block, where the node builds one, holds transactions not mined yet.
	var pending *rpcBlockTxs
	if err := c.call(ctx, &pending, "eth_getBlockByNumber", "pending", true); err == nil && pending != nil {
		if _, err := collectSent(pending, true, from, wanted, lowest, found); err != nil {
			return nil, err
		}
	}
	head, err := c.LatestHeader(ctx)
	if err != nil {
		return nil, err
	}
	scanned := uint64(0)
	for number := head.Number + 1; number > 0 && scanned < maxBlocks && len(found) < len(wanted); {
		count := min(uint64(sentScanBatch), number, maxBlocks-scanned)
		blocks := make([]*rpcBlockTxs, count)
		elems := make([]rpc.BatchElem, count)
		for i := range elems {
			elems[i] = rpc.BatchElem{Method: "eth_getBlockByNumber", Args: []any{hexutil.EncodeUint64(number - 1 - uint64(i)), true}, Result: &blocks[i]}
		}
		if err := c.batchCall(ctx, elems); err != nil {
			return nil, err
		}
		for i, block := range blocks {
			if elems[i].Error != nil {
				return nil, fmt.Errorf("block %d: %w", number-1-uint64(i), elems[i].Error)
			}
			if block == nil {
				continue
			}
			older, err := collectSent(block, false, from, wanted, lowest, found)
			if err != nil {
				return nil, err
			}
			if older {
				return found, nil
			}
		}
		number -= count
		scanned += count
	}
	return found, nil
}

// collectSent records block's transactions from the sender at wanted nonces, and reports
// whether it met one older than every wanted nonce (the scan can stop there).
func collectSent(block *rpcBlockTxs, pending bool, from common.Address, wanted map[uint64]bool, lowest uint64, found map[uint64]services.SentTx) (bool, error) {
	older := false
	err := eachSent(block, pending, from, func(sent services.SentTx) bool {
		if sent.Nonce < lowest {
			older = true
		}
		if _, seen := found[sent.Nonce]; wanted[sent.Nonce] && !seen {
			found[sent.Nonce] = sent
		}
		return true
	})
	return older, err
}

// eachSent hands keep the block's transactions from the sender, in block order, until keep
// answers false. Only the sender's transactions are decoded whole.
func eachSent(block *rpcBlockTxs, pending bool, from common.Address, keep func(services.SentTx) bool) error {
	for _, raw := range block.Transactions {
		var sender rpcTxFrom
		if err := json.Unmarshal(raw, &sender); err != nil {
			return fmt.Errorf("decode transaction sender: %w", err)
		}
		if sender.From != from {
			continue
		}
		var tx types.Transaction
		if err := tx.UnmarshalJSON(raw); errors.Is(err, types.ErrTxTypeNotSupported) {
			// A kind the service never signs (an OP-stack deposit, Arbitrum's system and
			// retryable transactions) from the same address: not one of ours, and no reason
			// to fail the whole block.
			continue
		} else if err != nil {
			return fmt.Errorf("decode transaction: %w", err)
		}
		encoded, err := tx.MarshalBinary()
		if err != nil {
			return err
		}
		sent := services.SentTx{Hash: tx.Hash(), Nonce: tx.Nonce(), To: tx.To(), Value: tx.Value(), Data: tx.Data(), Gas: tx.Gas(),
			MaxFee: tx.GasFeeCap(), MaxTip: tx.GasTipCap(), Raw: encoded}
		if !pending {
			sent.BlockNumber = uint64(block.Number)
			if block.Hash != nil {
				sent.BlockHash = *block.Hash
			}
		}
		if !keep(sent) {
			return nil
		}
	}
	return nil
}

// ScanSent implements services.Chain: the blocks from first on are read oldest first, a
// batch of requests at a time, and the sender's transactions at nonces from fromNonce on
// are collected in chain order. The scan ends with the block in which the limit was
// reached, after maxBlocks blocks, or at the head; Next says where the next scan resumes.
func (c *RPCChain) ScanSent(ctx context.Context, from common.Address, first, maxBlocks, fromNonce uint64, limit int) (services.SentScan, error) {
	head, err := c.LatestHeader(ctx)
	if err != nil {
		return services.SentScan{}, err
	}
	scan := services.SentScan{Next: first, Head: head.Number}
	for scan.Next <= head.Number && scan.Next-first < maxBlocks && len(scan.Txs) < limit {
		count := min(uint64(sentScanBatch), head.Number+1-scan.Next, maxBlocks-(scan.Next-first))
		blocks := make([]*rpcBlockTxs, count)
		elems := make([]rpc.BatchElem, count)
		for i := range elems {
			elems[i] = rpc.BatchElem{Method: "eth_getBlockByNumber", Args: []any{hexutil.EncodeUint64(scan.Next + uint64(i)), true}, Result: &blocks[i]}
		}
		if err := c.batchCall(ctx, elems); err != nil {
			return services.SentScan{}, err
		}
		for i, block := range blocks {
			number := scan.Next
			if elems[i].Error != nil {
				return services.SentScan{}, fmt.Errorf("block %d: %w", number, elems[i].Error)
			}
			if block == nil {
				return scan, nil // an endpoint behind the head it reported: resume here later
			}
			err := eachSent(block, false, from, func(sent services.SentTx) bool {
				if sent.Nonce >= fromNonce {
					scan.Txs = append(scan.Txs, sent)
				}
				return true
			})
			if err != nil {
				return services.SentScan{}, fmt.Errorf("block %d: %w", number, err)
			}
			scan.Next++
			if len(scan.Txs) >= limit {
				return scan, nil
			}
		}
	}
	return scan, nil
}

// NonceAtBlock implements services.Chain: eth_getTransactionCount at a block, which a node
// keeping only recent state may refuse.
func (c *RPCChain) NonceAtBlock(ctx context.Context, account common.Address, block uint64) (uint64, error) {
	nonce, err := c.countedEthCall().NonceAt(ctx, account, new(big.Int).SetUint64(block))
	if err != nil {
		return 0, fmt.Errorf("nonce of %s at block %d: %w", account, block, err)
	}
	return nonce, nil
}
