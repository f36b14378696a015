package chain

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"net/http"

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
	GasLimit   hexutil.Uint64 `json:"gasLimit"`
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

// Header calls. eth_getBlockByNumber(n, false) answers with the block's transaction
// hashes: 68 bytes for each transaction, so 400 KB for a block of 6,000 transfers, which the
// node encodes and the service decodes on every poll of the head. eth_getHeaderByNumber
// (geth, Erigon, reth) answers the same header without them. A node that does not know it
// is asked with eth_getBlockByNumber from its first refusal on.
const (
	headerOnlyMethod = "eth_getHeaderByNumber"
	blockMethod      = "eth_getBlockByNumber"
)

// headerMethod is the call this endpoint answers headers with.
func (c *RPCChain) headerMethod() string {
	if c.headersByBlock.Load() {
		return blockMethod
	}
	return headerOnlyMethod
}

// headerElem asks for one header with method.
func headerElem(method, block string, into **rpcHeader) rpc.BatchElem {
	args := []any{block}
	if method == blockMethod {
		args = append(args, false)
	}
	return rpc.BatchElem{Method: method, Args: args, Result: into}
}

// askHeaders makes a call that reads headers with the endpoint's header method, and makes it
// once more with eth_getBlockByNumber when the node refuses eth_getHeaderByNumber as
// unknown, which it then remembers. call returns its header request's own error (a batch
// element's) and its transport error; askHeaders returns the transport error. Only a
// refusal of the method itself counts: an unknown block or tag is the same answer either
// way. A gateway that allows a list of methods may refuse the others with an HTTP status
// rather than a JSON-RPC error; that counts too.
func (c *RPCChain) askHeaders(call func(method string) (headerErr, err error)) error {
	for {
		method := c.headerMethod()
		headerErr, err := call(method)
		if method != headerOnlyMethod || !isMethodNotFound(headerErr, method) && !refusedByStatus(err) {
			return err
		}
		c.headersByBlock.Store(true)
	}
}

// refusedByStatus: the endpoint refused the request with an HTTP status that says it will
// not take it as asked (bad request, not found, method not allowed, not implemented), not
// that it failed or is throttling.
func refusedByStatus(err error) bool {
	var httpErr rpc.HTTPError
	if !errors.As(err, &httpErr) {
		return false
	}
	switch httpErr.StatusCode {
	case http.StatusBadRequest, http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return true
	}
	return false
}

// HeadersByNumber implements services.Chain with batched header calls (askHeaders).
func (c *RPCChain) HeadersByNumber(ctx context.Context, numbers []uint64) ([]*services.BlockHeader, error) {
	if len(numbers) == 0 {
		return nil, nil
	}
	decoded := make([]*rpcHeader, len(numbers))
	elems := make([]rpc.BatchElem, len(numbers))
	err := c.askHeaders(func(method string) (error, error) {
		for i, number := range numbers {
			elems[i] = headerElem(method, hexutil.EncodeUint64(number), &decoded[i])
		}
		err := c.batchCall(ctx, elems)
		return elems[0].Error, err
	})
	if err != nil {
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
	err := c.askHeaders(func(method string) (error, error) {
		elem := headerElem(method, tag, &header)
		err := c.call(ctx, elem.Result, method, elem.Args...)
		return err, err
	})
	if err != nil {
		return nil, fmt.Errorf("%s block: %w", tag, err)
	}
	return header, nil
}
