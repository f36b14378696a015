package chain

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/ethereum/go-ethereum"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/ethclient"
	"github.com/ethereum/go-ethereum/rpc"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/bionicotaku/txmanager-service/internal/services"
)

// DefaultMaxBatchSize keeps batch calls well under the 1,000-element default limit geth
// puts on a single batch, and under the lower limits of most hosted providers.
const DefaultMaxBatchSize = 100

var _ services.Chain = (*RPCChain)(nil)

// RPCChain implements services.Chain over a go-ethereum JSON-RPC client.
type RPCChain struct {
	// name is the endpoint as errors and spans tell it (WithEndpointName).
	name         string
	rpcClient    *rpc.Client
	ethClient    *ethclient.Client
	maxBatchSize int
	requests     atomic.Int64
	tracer       trace.Tracer
	// transport is the HTTP transport DialRPC made (nil otherwise): Close closes its kept-alive
	// connections too.
	transport *http.Transport
	// compressResponses asks an HTTP node to gzip its answers (DialRPC only).
	compressResponses bool
	// headersByBlock: the node refused eth_getHeaderByNumber, so headers are asked for with
	// eth_getBlockByNumber (headers.go).
	headersByBlock atomic.Bool
	// blockReceipts reads eth_getBlockReceipts answers itself on an http(s) endpoint
	// DialRPC dialed (receipts_http.go); nil leaves them to the client.
	blockReceipts *blockReceiptsHTTP
	// limits remembers the Retry-After of the endpoint's 429 answers (DialRPC only).
	limits *retryAfterTransport
	// opStack: the chain charges an L1 data fee (WithOPStackFees).
	opStack bool
	// batchLimit is the batch size in force: maxBatchSize until the endpoint refuses a
	// batch as too large, then half of what it refused, down to one call (0: not lowered).
	batchLimit atomic.Int64
}

// RateLimitPause is how long to leave this endpoint alone after it refused because of its
// request rate: its Retry-After when it gave one.
func (c *RPCChain) RateLimitPause(now time.Time) time.Duration { return c.limits.pause(now) }

// RPCOption adjusts an RPCChain at construction.
type RPCOption func(*RPCChain)

// WithMaxBatchSize caps how many calls go into one JSON-RPC batch request. Values below 1
// keep the default.
func WithMaxBatchSize(size int) RPCOption {
	return func(c *RPCChain) {
		if size > 0 {
			c.maxBatchSize = size
		}
	}
}

// WithTracer records a span for every JSON-RPC request (one per batch).
func WithTracer(tracer trace.Tracer) RPCOption {
	return func(c *RPCChain) {
		if tracer != nil {
			c.tracer = tracer
		}
	}
}

// WithEndpointName names the endpoint in its errors and spans in place of its address,
// where providers put their API keys (EndpointName). Without it DialRPC names the endpoint
// as EndpointName(0, url).
func WithEndpointName(name string) RPCOption {
	return func(c *RPCChain) { c.name = name }
}

// WithResponseCompression asks an HTTP endpoint to gzip its answers (Accept-Encoding:
// gzip), which is what Go's HTTP client does unless told otherwise. Off by default: geth
// compresses every answer it is asked to, and between a service and its node on one network
// the compression (geth) and decompression (here) cost both sides CPU for bytes a local link
// carries anyway; in bench-chain's profile decompression was about 7% of the service's CPU.
// Worth turning on for a hosted endpoint reached over a slow or metered link, where a block's
// receipts compress several times over.
func WithResponseCompression(on bool) RPCOption {
	return func(c *RPCChain) { c.compressResponses = on }
}

// idleConnectionsPerNode is how many kept-alive HTTP connections to one node the client
// holds between requests. The pipeline's loops call a node from many goroutines at once
// (each signer's submitter and receipt checker, heads, fees); Go's default keeps 2, so
// every call beyond two opened a new TCP connection and closed it after, a connect and an
// accept on each side for a request of a few hundred bytes.
const idleConnectionsPerNode = 64

// DialRPC connects to a node's JSON-RPC endpoint (http, https, ws, wss or an IPC path).
// Close the returned chain to release the connection.
func DialRPC(ctx context.Context, url string, opts ...RPCOption) (*RPCChain, error) {
	c := newRPCChain(opts)
	if c.name == "" {
		c.name = EndpointName(0, url)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.MaxIdleConns, transport.MaxIdleConnsPerHost = idleConnectionsPerNode, idleConnectionsPerNode
	transport.DisableCompression = !c.compressResponses
	c.limits = &retryAfterTransport{next: transport}
	httpClient := &http.Client{Transport: c.limits}
	rpcClient, err := rpc.DialOptions(ctx, url, rpc.WithHTTPClient(httpClient))
	if err != nil {
		// The caller names the endpoint without its path and query, where keys go.
		return nil, fmt.Errorf("dial: %w", withoutURL(err, c.name))
	}
	c.attach(rpcClient)
	c.transport = transport
	c.blockReceipts = receiptsOverHTTP(url, httpClient)
	return c, nil
}

// NewRPCChain wraps an existing client. Close on the result closes that client.
func NewRPCChain(rpcClient *rpc.Client, opts ...RPCOption) *RPCChain {
	c := newRPCChain(opts)
	c.attach(rpcClient)
	return c
}

// newRPCChain is a chain with its options applied and no client yet: DialRPC needs the
// options before it dials.
func newRPCChain(opts []RPCOption) *RPCChain {
	c := &RPCChain{maxBatchSize: DefaultMaxBatchSize, tracer: tracenoop.NewTracerProvider().Tracer("")}
	for _, opt := range opts {
		opt(c)
	}
	return c
}

func (c *RPCChain) attach(rpcClient *rpc.Client) {
	c.rpcClient, c.ethClient = rpcClient, ethclient.NewClient(rpcClient)
}

// RequestCount is how many JSON-RPC requests this chain has sent; a batch counts once,
// whatever its size, because round trips are what batching saves.
func (c *RPCChain) RequestCount() int64 {
	return c.requests.Load()
}

// Close releases the underlying client and its kept-alive connections. A connection left
// open unused would hold up the node's own shutdown: an HTTP server waits up to 5 s for a
// connection that never sent a request.
func (c *RPCChain) Close() {
	c.rpcClient.Close()
	if c.transport != nil {
		c.transport.CloseIdleConnections()
	}
}

// call is the single place non-batched requests go through, so the request counter
// cannot drift from what is actually sent.
func (c *RPCChain) call(ctx context.Context, result any, method string, args ...any) error {
	return c.send(ctx, "chain.rpc "+method, method, func(ctx context.Context) error {
		return c.rpcClient.CallContext(ctx, result, method, args...)
	})
}

// batchCall sends elems in as few requests as the endpoint's batch size allows. An
// endpoint that refuses a batch as too large (a provider's or the node's own limit,
// go-ethereum's --rpc.batch-request-limit, or HTTP 413) gets the same calls again at
// once in batches half as large, and keeps that size. The returned error is for the
// transport; per-element errors stay in each BatchElem.
func (c *RPCChain) batchCall(ctx context.Context, elems []rpc.BatchElem) error {
	for start := 0; start < len(elems); {
		size := c.batchSize()
		end := min(start+size, len(elems))
		chunk := elems[start:end]
		method := chunk[0].Method
		err := c.send(ctx, "chain.rpc batch "+method, method, func(ctx context.Context) error {
			return c.rpcClient.BatchCallContext(ctx, chunk)
		}, attribute.Int("rpc.batch_size", len(chunk)))
		if len(chunk) > 1 && batchTooLarge(err, chunk) {
			c.batchLimit.Store(int64(max(len(chunk)/2, 1)))
			for i := range chunk {
				chunk[i].Error = nil
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("batch of %d calls to %s: %w", len(chunk), method, err)
		}
		start = end
	}
	return nil
}

// batchSize is how many calls go into one batch to this endpoint.
func (c *RPCChain) batchSize() int {
	if limit := int(c.batchLimit.Load()); limit > 0 && limit < c.maxBatchSize {
		return limit
	}
	return c.maxBatchSize
}

// BatchSize is how many calls this endpoint takes in one batch, as far as it has said.
func (c *RPCChain) BatchSize() int { return c.batchSize() }

// send makes one JSON-RPC request: counted, inside a client span that records its error.
func (c *RPCChain) send(ctx context.Context, spanName, method string, do func(context.Context) error, attrs ...attribute.KeyValue) error {
	c.requests.Add(1)
	attrs = append(attrs, attribute.String("rpc.system", "jsonrpc"), attribute.String("rpc.method", method))
	ctx, span := c.tracer.Start(ctx, spanName, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	defer span.End()
	err := do(ctx)
	if err != nil {
		// Before the span records it: spans go to a collector outside the service.
		err = withoutURL(err, c.name)
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}

// countedEthCall counts one request for an ethclient method; each ethclient method used
// here issues exactly one JSON-RPC call.
func (c *RPCChain) countedEthCall() *ethclient.Client {
	c.requests.Add(1)
	return c.ethClient
}

// Usable implements services.Chain: a single client has no health of its own to report.
func (c *RPCChain) Usable() error { return nil }

// ChainID is eth_chainId.
func (c *RPCChain) ChainID(ctx context.Context) (*big.Int, error) {
	id, err := c.countedEthCall().ChainID(ctx)
	if err != nil {
		return nil, fmt.Errorf("eth_chainId: %w", err)
	}
	return id, nil
}

// PendingNonceAt implements services.Chain.
func (c *RPCChain) PendingNonceAt(ctx context.Context, account common.Address) (uint64, error) {
	nonce, err := c.countedEthCall().PendingNonceAt(ctx, account)
	if err != nil {
		return 0, fmt.Errorf("pending nonce of %s: %w", account, err)
	}
	return nonce, nil
}

// NonceAt is eth_getTransactionCount(account, "latest"): transactions mined so far.
func (c *RPCChain) NonceAt(ctx context.Context, account common.Address) (uint64, error) {
	nonce, err := c.countedEthCall().NonceAt(ctx, account, nil)
	if err != nil {
		return 0, fmt.Errorf("latest nonce of %s: %w", account, err)
	}
	return nonce, nil
}

// BalanceAt implements services.Chain.
func (c *RPCChain) BalanceAt(ctx context.Context, account common.Address) (*big.Int, error) {
	balance, err := c.countedEthCall().BalanceAt(ctx, account, nil)
	if err != nil {
		return nil, fmt.Errorf("balance of %s: %w", account, err)
	}
	return balance, nil
}

// AccountAt implements services.BalanceSource: the endpoint's latest block number, then the
// account's balance and nonce at one block, in one batch, so both describe the
// same block whatever arrives in between. At the head, and lower if that block is not
// known: behind a provider that spreads requests over several nodes, the batch may reach a
// node some blocks behind the one that gave the number.
func (c *RPCChain) AccountAt(ctx context.Context, account common.Address) (services.AccountState, error) {
	head, err := c.countedEthCall().BlockNumber(ctx)
	if err != nil {
		return services.AccountState{}, fmt.Errorf("block number: %w", err)
	}
	var lastErr error
	for _, below := range accountReadDepths {
		block := head - min(head, below)
		state, err := c.accountAtBlock(ctx, account, block)
		if err == nil {
			return state, nil
		}
		var rpcErr rpc.Error
		if !errors.As(err, &rpcErr) || isRateLimited(err) {
			return services.AccountState{}, err // the endpoint failed or throttles us, not the block: another endpoint may answer
		}
		lastErr = err
	}
	return services.AccountState{}, lastErr
}

// accountReadDepths are how far below the head AccountAt reads, in turn: a read deeper than
// needed only counts a few more transactions as unpaid until the next reload.
var accountReadDepths = []uint64{0, 2, 16}

// accountAtBlock reads the account's balance and nonce at block, in one batch.
func (c *RPCChain) accountAtBlock(ctx context.Context, account common.Address, block uint64) (services.AccountState, error) {
	var (
		balance hexutil.Big
		nonce   hexutil.Uint64
		number  = hexutil.EncodeUint64(block)
	)
	elems := []rpc.BatchElem{
		{Method: "eth_getBalance", Args: []any{account, number}, Result: &balance},
		{Method: "eth_getTransactionCount", Args: []any{account, number}, Result: &nonce},
	}
	if err := c.batchCall(ctx, elems); err != nil {
		return services.AccountState{}, fmt.Errorf("balance and nonce of %s at block %d: %w", account, block, err)
	}
	for _, elem := range elems {
		if elem.Error != nil {
			return services.AccountState{}, fmt.Errorf("%s of %s at block %d: %w", elem.Method, account, block, elem.Error)
		}
	}
	return services.AccountState{Balance: balance.ToInt(), Nonce: uint64(nonce), Block: block}, nil
}

// EstimateGas implements services.Chain.
func (c *RPCChain) EstimateGas(ctx context.Context, call services.CallRequest) (uint64, error) {
	gas, err := c.countedEthCall().EstimateGas(ctx, ethereum.CallMsg{
		From:      call.From,
		To:        call.To,
		Gas:       call.Gas,
		GasFeeCap: call.MaxFeePerGas,
		GasTipCap: call.MaxPriorityFeePerGas,
		Value:     call.Value,
		Data:      call.Data,
	})
	if err != nil {
		return 0, classifyEstimateError(err)
	}
	return gas, nil
}

// SendRawTransaction broadcasts one signed transaction; failures are classified as in SendRawTransactions.
func (c *RPCChain) SendRawTransaction(ctx context.Context, raw []byte) error {
	// The hash the node returns is ignored: the caller signed the bytes and already knows it.
	return ClassifySendErrorOf(raw, c.call(ctx, nil, "eth_sendRawTransaction", hexutil.Bytes(raw)))
}

// SendRawTransactions implements services.Chain with batched eth_sendRawTransaction. A
// batch keeps its order on the wire, so a signer's nonces reach the node lowest first.
func (c *RPCChain) SendRawTransactions(ctx context.Context, raws [][]byte) ([]error, error) {
	if len(raws) == 0 {
		return nil, nil
	}
	elems := make([]rpc.BatchElem, len(raws))
	hashes := make([]common.Hash, len(raws)) // answers are decoded and ignored, like SendRawTransaction's
	for i, raw := range raws {
		elems[i] = rpc.BatchElem{Method: "eth_sendRawTransaction", Args: []any{hexutil.Bytes(raw)}, Result: &hashes[i]}
	}
	if err := c.batchCall(ctx, elems); err != nil {
		return nil, err
	}
	if err := throttledBatch(elems); err != nil {
		return nil, err
	}
	errs := make([]error, len(raws))
	for i, elem := range elems {
		errs[i] = ClassifySendErrorOf(raws[i], elem.Error)
	}
	return errs, nil
}
