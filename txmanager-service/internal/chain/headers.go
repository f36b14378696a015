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

// rpcHeader decodes only what finality and fee suggestion need. The hash is taken as the
// node reports it rather than recomputed from fields, because chains with extra header
// fields (many L2s) hash differently from go-ethereum's types.Header.
type rpcHeader struct {
	Number     hexutil.Uint64 `json:"number"`
	Hash       common.Hash    `json:"hash"`
	ParentHash common.Hash    `json:"parentHash"`
	Time       hexutil.Uint64 `json:"timestamp"`
	BaseFee    *hexutil.Big   `json:"baseFeePerGas"`
}

func (h *rpcHeader) toBlockHeader() *services.BlockHeader {
	if h == nil {
		return nil
	}
	return &services.BlockHeader{
		Number:     uint64(h.Number),
		Hash:       h.Hash,
		ParentHash: h.ParentHash,
		Time:       uint64(h.Time),
	}
}

func (h *rpcHeader) baseFee() *big.Int {
	if h == nil || h.BaseFee == nil {
		return nil
	}
	return (*big.Int)(h.BaseFee)
}

// getBlockHeaderElem asks for a block without its transactions, which is all a header needs.
func getBlockHeaderElem(block string, into **rpcHeader) rpc.BatchElem {
	return rpc.BatchElem{
		Method: "eth_getBlockByNumber",
		Args:   []any{block, false},
		Result: into,
	}
}

// HeadersByNumber implements services.Chain with batched eth_getBlockByNumber.
func (c *RPCChain) HeadersByNumber(ctx context.Context, numbers []uint64) ([]*services.BlockHeader, error) {
	if len(numbers) == 0 {
		return nil, nil
	}
	decoded := make([]*rpcHeader, len(numbers))
	elems := make([]rpc.BatchElem, len(numbers))
	for i, number := range numbers {
		elems[i] = getBlockHeaderElem(hexutil.EncodeUint64(number), &decoded[i])
	}
	if err := c.batchCall(ctx, elems); err != nil {
		return nil, err
	}
	headers := make([]*services.BlockHeader, len(numbers))
	for i, elem := range elems {
		// Unlike receipts, the port has no per-entry error slot for headers, and a
		// finality decision made on a partial view would be wrong, so any failure fails all.
		if elem.Error != nil {
			return nil, fmt.Errorf("header at height %d: %w", numbers[i], elem.Error)
		}
		headers[i] = decoded[i].toBlockHeader()
	}
	return headers, nil
}

// LatestHeader implements services.Chain.
func (c *RPCChain) LatestHeader(ctx context.Context) (*services.BlockHeader, error) {
	header, err := c.headerByTag(ctx, "latest")
	if err != nil {
		return nil, err
	}
	if header == nil {
		return nil, errors.New("node returned no latest block")
	}
	return header.toBlockHeader(), nil
}

// FinalizedHeader implements services.Chain.
func (c *RPCChain) FinalizedHeader(ctx context.Context) (*services.BlockHeader, error) {
	header, err := c.headerByTag(ctx, "finalized")
	if err != nil {
		if isNotSupported(err) {
			return nil, fmt.Errorf("%w: %w", services.ErrNotSupported, err)
		}
		return nil, err
	}
	if header == nil {
		return nil, fmt.Errorf("%w: node returned no finalized block", services.ErrNotSupported)
	}
	return header.toBlockHeader(), nil
}

// headerByTag returns nil, nil when the node answers null.
func (c *RPCChain) headerByTag(ctx context.Context, tag string) (*rpcHeader, error) {
	var header *rpcHeader
	if err := c.call(ctx, &header, "eth_getBlockByNumber", tag, false); err != nil {
		return nil, fmt.Errorf("%s block: %w", tag, err)
	}
	return header, nil
}
