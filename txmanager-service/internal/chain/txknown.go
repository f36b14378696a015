package chain

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/rpc"
)

// TransactionsKnown implements services.Chain with batched eth_getTransactionByHash: a
// non-null answer means the node has the transaction, pending or mined.
func (c *RPCChain) TransactionsKnown(ctx context.Context, hashes []common.Hash) ([]bool, error) {
	if len(hashes) == 0 {
		return nil, nil
	}
	raw := make([]json.RawMessage, len(hashes))
	elems := make([]rpc.BatchElem, len(hashes))
	for i, hash := range hashes {
		elems[i] = rpc.BatchElem{Method: "eth_getTransactionByHash", Args: []any{hash}, Result: &raw[i]}
	}
	if err := c.batchCall(ctx, elems); err != nil {
		return nil, err
	}
	known := make([]bool, len(hashes))
	for i, elem := range elems {
		if elem.Error != nil {
			return nil, fmt.Errorf("transaction %s: %w", hashes[i], elem.Error)
		}
		known[i] = len(raw[i]) > 0 && string(raw[i]) != "null"
	}
	return known, nil
}
