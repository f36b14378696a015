package chain

import (
	"context"
	"encoding/json"
	"fmt"
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
	for _, raw := range block.Transactions {
		var sender rpcTxFrom
		if err := json.Unmarshal(raw, &sender); err != nil {
			return false, fmt.Errorf("decode transaction sender: %w", err)
		}
		if sender.From != from {
			continue
		}
		var tx types.Transaction
		if err := tx.UnmarshalJSON(raw); err != nil {
			return false, fmt.Errorf("decode transaction: %w", err)
		}
		nonce := tx.Nonce()
		if nonce < lowest {
			older = true
		}
		if !wanted[nonce] {
			continue
		}
		if _, seen := found[nonce]; seen {
			continue
		}
		encoded, err := tx.MarshalBinary()
		if err != nil {
			return false, err
		}
		sent := services.SentTx{Hash: tx.Hash(), Nonce: nonce, To: tx.To(), Value: tx.Value(), Data: tx.Data(), Gas: tx.Gas(),
			MaxFee: tx.GasFeeCap(), MaxTip: tx.GasTipCap(), Raw: encoded}
		if !pending {
			sent.BlockNumber = uint64(block.Number)
		}
		found[nonce] = sent
	}
	return older, nil
}
