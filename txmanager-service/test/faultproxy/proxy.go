// Package faultproxy is a fault-injection test tool: an HTTP proxy that puts the faults
// production RPC endpoints bring between the service and a real node (geth, or the
// simulated chain served over HTTP): an endpoint that accepts and never answers, one that
// refuses connections, and one that serves a head some blocks behind, always or on every
// other request like a load balancer over backends at different heights. Tests and the
// chain chaos suite use it; the service never does (how the service reads a node's answers
// is production code under internal/).
package faultproxy

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ethereum/go-ethereum/core/types"
)

// Mode is how the proxy treats requests.
type Mode int32

const (
	// Pass forwards every request.
	Pass Mode = iota
	// Hang accepts connections and requests and never answers.
	Hang
	// Refuse closes the listening socket: connections are refused.
	Refuse
	// Lag serves the chain as a node Lag blocks behind would.
	Lag
	// TooManyRequests answers every request as a hosted provider over its rate limit does:
	// HTTP 429 with a Retry-After header (SetRetryAfter).
	TooManyRequests
	// LimitExceeded answers every request, and every call of a batch, with the JSON-RPC
	// error -32005 "limit exceeded" (HTTP 200), as some providers signal their limits.
	LimitExceeded
	// PoolFull answers every eth_sendRawTransaction (alone, or a batch of them) as a node
	// whose transaction pool has no room does: the JSON-RPC error "txpool is full"
	// (go-ethereum's ErrTxPoolOverflow). Every other call passes.
	PoolFull
	// NoBlockReceipts answers every eth_getBlockReceipts (alone, or a batch of them) as a node
	// without the method does. Every other call passes.
	NoBlockReceipts
	// L1GasShort answers every eth_sendRawTransaction (alone, or a batch of them) as Arbitrum
	// Nitro answers a gas limit short of the L1 part of the cost, which it counts as gas:
	// "intrinsic gas too low", go-ethereum's bare words. Every other call passes.
	L1GasShort
	// NoOldState serves the chain as a node that keeps the state of its recent blocks only
	// (a full node, not an archive): an account's state read at a block more than
	// SetStateKept blocks below the head is refused with go-ethereum's words. Blocks,
	// transactions and receipts of every height are still served.
	NoOldState
	// L1Priced serves the chain as Arbitrum Nitro does, which counts a transaction's L1 cost
	// as gas (SetL1Gas): its gas estimates carry the L1 part at the price it last quoted, and
	// a transfer whose gas limit is short of 21000 plus the L1 part at the price now is
	// refused as "intrinsic gas too low". Every other call passes.
	L1Priced
)

func (m Mode) String() string {
	return [...]string{"pass", "hang", "refuse", "lag", "too many requests", "limit exceeded", "pool full", "no block receipts", "L1 gas short", "no old state", "L1 priced"}[m]
}

// Proxy is a JSON-RPC proxy on a loopback port of its own in front of one node.
type Proxy struct {
	// upstream is the node's URL; it changes when the node restarts on another port.
	upstream atomic.Pointer[string]
	client   *http.Client

	mode      atomic.Int32
	lagBlocks atomic.Uint64
	// alternate applies Lag to every other request only.
	alternate atomic.Bool
	// legacy hides the base fee from blocks: the node looks like a chain without EIP-1559.
	legacy atomic.Bool
	// depositsFrom, when set, adds to every block read with its transactions an OP-stack
	// deposit (type 0x7e) from that address: a kind go-ethereum does not decode.
	depositsFrom atomic.Pointer[string]
	// l1GasQuoted and l1GasNow are L1Priced's L1 part in gas, in its estimates and in what
	// it takes.
	l1GasQuoted, l1GasNow atomic.Uint64
	// stateKept is how many blocks below the head NoOldState still has the state of.
	stateKept atomic.Uint64
	// oldStateRefused counts the state reads NoOldState refused.
	oldStateRefused atomic.Uint64
	// retryAfter is the Retry-After, in whole seconds, of TooManyRequests answers.
	retryAfter atomic.Int64
	// limited counts the requests answered TooManyRequests or LimitExceeded.
	limited  atomic.Uint64
	requests atomic.Uint64
	// refusedSends counts the broadcast requests PoolFull answered.
	refusedSends atomic.Uint64
	// connections counts the TCP connections the proxy accepted; ended, those of them closed since.
	connections, ended atomic.Uint64
	// hold, when set, keeps the node's answers to one method from the caller until released.
	hold atomic.Pointer[answerHold]
	// reword, when set, rewrites the node's JSON-RPC errors (SetErrorWording).
	reword atomic.Pointer[ErrorWording]
	// refusedMethod, when set, is a method the proxy refuses with an HTTP status
	// (RefuseMethodWithStatus).
	refusedMethod atomic.Pointer[methodRefusal]

	mu       sync.Mutex
	addr     string
	listener net.Listener
	server   *http.Server
	serving  sync.WaitGroup
	closed   chan struct{}
}

// Start listens on a free loopback port and forwards to upstream (an http:// JSON-RPC URL).
func Start(upstream string) (*Proxy, error) {
	p := &Proxy{client: &http.Client{}, closed: make(chan struct{})}
	p.upstream.Store(&upstream)
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen: %w", err)
	}
	p.addr = listener.Addr().String()
	p.serve(listener)
	return p, nil
}

// answerHold is HoldAnswers' gate.
type answerHold struct {
	method string
	gate   chan struct{}
	held   atomic.Int64
}

// HoldAnswers keeps the node's answers to requests made only of calls of method from their
// callers, from now until release is called: the node has answered, the answer is on its
// way, and whatever the proxy does meanwhile (another mode for later requests) does not
// stop it. Held counts the answers waiting. Requests already in flight are not held.
func (p *Proxy) HoldAnswers(method string) (held func() int64, release func()) {
	h := &answerHold{method: method, gate: make(chan struct{})}
	p.hold.Store(h)
	var once sync.Once
	return h.held.Load, func() {
		once.Do(func() {
			p.hold.CompareAndSwap(h, nil)
			close(h.gate)
		})
	}
}

// URL is the proxy's JSON-RPC address.
func (p *Proxy) URL() string { return "http://" + p.addr }

// Requests is how many JSON-RPC requests (a batch counts once) reached the proxy.
func (p *Proxy) Requests() uint64 { return p.requests.Load() }

// Connections is how many TCP connections clients opened to the proxy.
func (p *Proxy) Connections() uint64 { return p.connections.Load() }

// OpenConnections is how many of them are still open.
func (p *Proxy) OpenConnections() uint64 { return p.connections.Load() - p.ended.Load() }

func (p *Proxy) serve(listener net.Listener) {
	server := &http.Server{Handler: http.HandlerFunc(p.handle), ReadHeaderTimeout: 10 * time.Second,
		ConnState: func(_ net.Conn, state http.ConnState) {
			switch state {
			case http.StateNew:
				p.connections.Add(1)
			case http.StateClosed, http.StateHijacked:
				p.ended.Add(1)
			}
		}}
	p.listener, p.server = listener, server
	p.serving.Go(func() { _ = server.Serve(listener) })
}

// SetMode switches the fault. Refuse closes the socket (open connections too); leaving it
// listens again on the same port.
func (p *Proxy) SetMode(m Mode) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := Mode(p.mode.Swap(int32(m)))
	switch {
	case m == Refuse && old != Refuse:
		_ = p.server.Close()
		p.listener = nil
	case m != Refuse && old == Refuse:
		var listener net.Listener
		var err error
		// The port was ours a moment ago; another socket may briefly hold it.
		for range 50 {
			if listener, err = net.Listen("tcp", p.addr); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			p.mode.Store(int32(Refuse))
			return fmt.Errorf("faultproxy: listen again on %s: %w", p.addr, err)
		}
		p.serve(listener)
	}
	return nil
}

// SetRetryAfter sets the Retry-After of TooManyRequests answers (at least a second).
func (p *Proxy) SetRetryAfter(d time.Duration) { p.retryAfter.Store(int64(d / time.Second)) }

// Limited is how many requests were answered TooManyRequests or LimitExceeded.
func (p *Proxy) Limited() uint64 { return p.limited.Load() }

// limitExceeded is the -32005 answer to body: one error object per call, a batch for a batch.
// answerCalls answers body with errObj for each call when every call in it is of method;
// ok is false for any other request.
func answerCalls(body []byte, method, errObj string) (answer []byte, ok bool) {
	trimmed := bytes.TrimSpace(body)
	var batch []rpcRequest
	single := len(trimmed) > 0 && trimmed[0] != '['
	if single {
		var one rpcRequest
		if err := json.Unmarshal(trimmed, &one); err != nil {
			return nil, false
		}
		batch = []rpcRequest{one}
	} else if err := json.Unmarshal(trimmed, &batch); err != nil || len(batch) == 0 {
		return nil, false
	}
	out := make([]json.RawMessage, len(batch))
	for i, req := range batch {
		if req.Method != method {
			return nil, false
		}
		out[i] = json.RawMessage(`{"jsonrpc":"2.0","id":` + string(orNull(req.ID)) + `,` + errObj + `}`)
	}
	if single {
		return out[0], true
	}
	answer, _ = json.Marshal(out)
	return answer, true
}

// missingStateMessage is what go-ethereum (path scheme, its default) answers for the state of
// a block it no longer keeps.
const missingStateMessage = "historical state 0x56e81f171bcc55a6ff8345e692c0f86e5b48e01b996cadc001622fb5e363b421 is not available"

// refusedSendMessages are the node's words of the modes that refuse every broadcast.
var refusedSendMessages = map[Mode]string{PoolFull: "txpool is full", L1GasShort: "intrinsic gas too low"}

// RefusedSends is how many requests of broadcasts the PoolFull and L1GasShort modes refused.
func (p *Proxy) RefusedSends() uint64 { return p.refusedSends.Load() }

func limitExceeded(body []byte) []byte {
	const errObj = `"error":{"code":-32005,"message":"limit exceeded"}`
	var batch []rpcRequest
	if err := json.Unmarshal(body, &batch); err == nil {
		out := make([]json.RawMessage, len(batch))
		for i, req := range batch {
			out[i] = json.RawMessage(`{"jsonrpc":"2.0","id":` + string(orNull(req.ID)) + `,` + errObj + `}`)
		}
		answer, _ := json.Marshal(out)
		return answer
	}
	var single rpcRequest
	_ = json.Unmarshal(body, &single)
	return []byte(`{"jsonrpc":"2.0","id":` + string(orNull(single.ID)) + `,` + errObj + `}`)
}

func orNull(id json.RawMessage) json.RawMessage {
	if len(id) == 0 {
		return json.RawMessage("null")
	}
	return id
}

// methodRefusal is RefuseMethodWithStatus's setting.
type methodRefusal struct {
	method string
	status int
}

// RefuseMethodWithStatus answers every request made only of calls of method with the HTTP
// status (a JSON-RPC error in the body), as gateways that allow a list of methods refuse the
// others; every other request passes. An empty method stops it.
func (p *Proxy) RefuseMethodWithStatus(method string, status int) {
	if method == "" {
		p.refusedMethod.Store(nil)
		return
	}
	p.refusedMethod.Store(&methodRefusal{method: method, status: status})
}

// ErrorWording rewrites one JSON-RPC error of the node's (its code and message) as another
// node implementation words the same refusal; ok false leaves it as it is.
type ErrorWording func(code int, message string) (newCode int, newMessage string, ok bool)

// SetErrorWording makes the proxy pass every request on and give the node's errors, in
// single answers and in batches, the wording reword gives them: the node's real refusal of
// a real request, as another implementation answers it. nil stops it.
func (p *Proxy) SetErrorWording(reword ErrorWording) {
	if reword == nil {
		p.reword.Store(nil)
		return
	}
	p.reword.Store(&reword)
}

// reworded is answer with its error objects rewritten; an answer it cannot read is kept.
func reworded(answer []byte, reword ErrorWording) []byte {
	type rpcError struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data,omitempty"`
	}
	one := func(resp *rpcResponse) {
		var e rpcError
		if len(resp.Error) == 0 || json.Unmarshal(resp.Error, &e) != nil {
			return
		}
		code, message, ok := reword(e.Code, e.Message)
		if !ok {
			return
		}
		e.Code, e.Message = code, message
		if out, err := json.Marshal(e); err == nil {
			resp.Error = out
		}
	}
	responses, batch, err := parseAnswers(answer)
	if err != nil {
		return answer
	}
	for i := range responses {
		one(&responses[i])
	}
	return encodeAnswers(responses, batch)
}

// parseAnswers reads a JSON-RPC answer: one response, or a batch of them.
func parseAnswers(answer []byte) ([]rpcResponse, bool, error) { return oneOrMany[rpcResponse](answer) }

// encodeAnswers writes responses back as parseAnswers read them.
func encodeAnswers(responses []rpcResponse, batch bool) []byte {
	var out []byte
	if batch {
		out, _ = json.Marshal(responses)
	} else {
		out, _ = json.Marshal(responses[0])
	}
	return out
}

// SetUpstream points the proxy at another node URL (the node restarted on a new port);
// requests already under way finish against the old one.
func (p *Proxy) SetUpstream(url string) { p.upstream.Store(&url) }

// SetLag sets how many blocks behind the Lag mode serves, and whether only every other
// request lags (a load balancer over backends at different heights).
func (p *Proxy) SetLag(blocks uint64, everyOtherRequest bool) {
	p.lagBlocks.Store(blocks)
	p.alternate.Store(everyOtherRequest)
}

// SetStateKept sets how many blocks below the head NoOldState keeps the state of (geth
// keeps 128 in memory; 0 keeps the head's only).
func (p *Proxy) SetStateKept(blocks uint64) { p.stateKept.Store(blocks) }

// OldStateRefused is how many state reads NoOldState refused.
func (p *Proxy) OldStateRefused() uint64 { return p.oldStateRefused.Load() }

// SetL1Gas sets L1Priced's L1 part in gas: quoted in its gas estimates, required of a
// transfer's gas limit now. A required part above the quoted one is an L1 price that rose
// after the estimate.
func (p *Proxy) SetL1Gas(quoted, required uint64) {
	p.l1GasQuoted.Store(quoted)
	p.l1GasNow.Store(required)
}

// parseCalls reads a JSON-RPC request body: one call, or a batch of them.
func parseCalls(body []byte) ([]rpcRequest, bool, error) { return oneOrMany[rpcRequest](body) }

// oneOrMany reads a JSON-RPC message that is one object or a batch (an array) of them, and
// whether it was a batch.
func oneOrMany[T any](raw []byte) (items []T, batch bool, err error) {
	trimmed := bytes.TrimSpace(raw)
	if batch = len(trimmed) > 0 && trimmed[0] == '['; batch {
		err = json.Unmarshal(trimmed, &items)
		return items, batch, err
	}
	var one T
	if err := json.Unmarshal(trimmed, &one); err != nil {
		return nil, false, err
	}
	return []T{one}, false, nil
}

// callsOnlyOf: every call in body (one call, or a batch) is of method.
func callsOnlyOf(body []byte, method string) bool {
	reqs, _, err := parseCalls(body)
	if err != nil || len(reqs) == 0 {
		return false
	}
	for _, req := range reqs {
		if req.Method != method {
			return false
		}
	}
	return true
}

// l1Priced answers body as L1Priced does: broadcasts short of the L1 part refused, gas
// estimates raised by the quoted part, every other call forwarded.
func (p *Proxy) l1Priced(ctx context.Context, body []byte) ([]byte, error) {
	reqs, batch, err := parseCalls(body)
	if err != nil {
		return nil, err
	}
	answers := make([]rpcResponse, len(reqs))
	var forward []rpcRequest
	for i, req := range reqs {
		answers[i] = rpcResponse{JSONRPC: "2.0", ID: orNull(req.ID)}
		if req.Method == "eth_sendRawTransaction" && p.shortOfL1Part(req) {
			p.refusedSends.Add(1)
			answers[i].Error = json.RawMessage(`{"code":-32000,"message":"intrinsic gas too low"}`)
			continue
		}
		forward = append(forward, req)
	}
	if len(forward) > 0 {
		upstream, err := json.Marshal(forward)
		if err != nil {
			return nil, err
		}
		answer, status, err := p.post(ctx, upstream)
		if err != nil {
			return nil, err
		}
		if status != http.StatusOK {
			return nil, fmt.Errorf("upstream answered %d: %s", status, answer)
		}
		var resps []rpcResponse
		if err := json.Unmarshal(answer, &resps); err != nil {
			return nil, err
		}
		byID := make(map[string]rpcResponse, len(resps))
		for _, resp := range resps {
			byID[string(resp.ID)] = resp
		}
		for i, req := range reqs {
			resp, ok := byID[string(req.ID)]
			if answers[i].Error != nil || !ok {
				continue
			}
			if req.Method == "eth_estimateGas" && resp.Error == nil {
				resp.Result = p.withL1Part(resp.Result)
			}
			answers[i] = resp
		}
	}
	if !batch {
		return json.Marshal(answers[0])
	}
	return json.Marshal(answers)
}

// shortOfL1Part: req broadcasts a transaction whose gas limit is below 21000 plus the L1
// part now (the transfers these tests send carry no data).
func (p *Proxy) shortOfL1Part(req rpcRequest) bool {
	if len(req.Params) == 0 {
		return false
	}
	var encoded string
	if err := json.Unmarshal(req.Params[0], &encoded); err != nil {
		return false
	}
	raw, err := hex.DecodeString(strings.TrimPrefix(encoded, "0x"))
	if err != nil {
		return false
	}
	var tx types.Transaction
	if err := tx.UnmarshalBinary(raw); err != nil {
		return false
	}
	return tx.Gas() < 21_000+p.l1GasNow.Load()
}

// withL1Part is a gas estimate raised by the quoted L1 part.
func (p *Proxy) withL1Part(result json.RawMessage) json.RawMessage {
	var estimate string
	if err := json.Unmarshal(result, &estimate); err != nil {
		return result
	}
	gas, err := strconv.ParseUint(strings.TrimPrefix(estimate, "0x"), 16, 64)
	if err != nil {
		return result
	}
	return json.RawMessage(strconv.Quote("0x" + strconv.FormatUint(gas+p.l1GasQuoted.Load(), 16)))
}

// SetLegacy makes the node look like a chain without EIP-1559: blocks carry no base fee.
// The node behind still mines legacy transactions, so the legacy path runs end to end.
func (p *Proxy) SetLegacy(on bool) { p.legacy.Store(on) }

// SetDepositsFrom makes every block read with its transactions carry an OP-stack deposit
// from address as well, and every block's receipts the deposit's receipt (nil: none), as a
// block of an OP-stack chain does when the account deposited from L1. The node has no raw
// transaction for it.
func (p *Proxy) SetDepositsFrom(address *string) { p.depositsFrom.Store(address) }

// withDeposits adds the deposit to the full-transaction blocks among answer's results.
func (p *Proxy) withDeposits(body, answer []byte) []byte {
	from := p.depositsFrom.Load()
	if from == nil {
		return answer
	}
	methods := map[string]string{}
	many, _, err := parseCalls(body)
	if err != nil {
		return answer
	}
	for _, r := range many {
		methods[string(r.ID)] = r.Method
	}
	responses, batch, err := parseAnswers(answer)
	if err != nil || len(responses) == 0 {
		return answer
	}
	deposit := json.RawMessage(fmt.Sprintf(`{"type":"0x7e","sourceHash":"0x%064x","from":%q,"to":%q,"mint":"0x1","value":"0x1","gas":"0x5208",`+
		`"isSystemTx":false,"input":"0x","nonce":"0x0","hash":"0x%064x","gasPrice":"0x0","v":"0x0","r":"0x0","s":"0x0"}`, 1, *from, *from, 2))
	depositReceipt := func(block json.RawMessage) json.RawMessage {
		var b struct {
			Number string `json:"blockNumber"`
			Hash   string `json:"blockHash"`
		}
		_ = json.Unmarshal(block, &b)
		// As op-geth reports a deposit: no L1 fee, none owed.
		return json.RawMessage(fmt.Sprintf(`{"type":"0x7e","transactionHash":"0x%064x","blockHash":%q,"blockNumber":%q,"transactionIndex":"0x0",`+
			`"status":"0x1","gasUsed":"0x5208","cumulativeGasUsed":"0x5208","effectiveGasPrice":"0x0","from":%q,"to":%q,"logs":[],`+
			`"logsBloom":"0x%0512x","contractAddress":null,"depositNonce":"0x0"}`, 2, b.Hash, b.Number, *from, *from, 0))
	}
	for i, resp := range responses {
		if m := methods[string(resp.ID)]; m == "eth_getBlockReceipts" && len(resp.Result) > 0 {
			var receipts []json.RawMessage
			if json.Unmarshal(resp.Result, &receipts) != nil || len(receipts) == 0 {
				continue
			}
			responses[i].Result, _ = json.Marshal(append([]json.RawMessage{depositReceipt(receipts[0])}, receipts...))
			continue
		}
		if m := methods[string(resp.ID)]; (m != "eth_getBlockByNumber" && m != "eth_getBlockByHash") || len(resp.Result) == 0 {
			continue
		}
		var block map[string]json.RawMessage
		if json.Unmarshal(resp.Result, &block) != nil {
			continue
		}
		var txs []json.RawMessage
		if json.Unmarshal(block["transactions"], &txs) != nil || (len(txs) > 0 && !bytes.HasPrefix(bytes.TrimSpace(txs[0]), []byte("{"))) {
			continue // hashes only
		}
		txs = append(txs, deposit)
		block["transactions"], _ = json.Marshal(txs)
		responses[i].Result, _ = json.Marshal(block)
	}
	return encodeAnswers(responses, batch)
}

// Close stops the proxy; hung requests end.
func (p *Proxy) Close() {
	p.mu.Lock()
	select {
	case <-p.closed:
	default:
		close(p.closed)
		if p.listener != nil {
			_ = p.server.Close()
		}
	}
	p.mu.Unlock()
	p.serving.Wait()
}

func (p *Proxy) handle(w http.ResponseWriter, r *http.Request) {
	n := p.requests.Add(1)
	body, err := io.ReadAll(io.LimitReader(r.Body, 32<<20))
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	mode, hold := Mode(p.mode.Load()), p.hold.Load()
	if mode == Lag && p.alternate.Load() && n%2 == 0 {
		mode = Pass
	}
	if mode == Pass && p.legacy.Load() {
		mode = Lag // a rewriting pass with no lag
	}
	if refusal := p.refusedMethod.Load(); refusal != nil && callsOnlyOf(body, refusal.method) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(refusal.status)
		_, _ = w.Write([]byte(`{"jsonrpc":"2.0","id":null,"error":{"code":-32601,"message":"method ` + refusal.method + ` is not allowed"}}`))
		return
	}
	switch mode {
	case TooManyRequests:
		p.limited.Add(1)
		w.Header().Set("Retry-After", strconv.FormatInt(max(p.retryAfter.Load(), 1), 10))
		http.Error(w, "rate limit exceeded", http.StatusTooManyRequests)
		return
	case LimitExceeded:
		p.limited.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(limitExceeded(body))
		return
	case PoolFull, L1GasShort:
		if answer, ok := answerCalls(body, "eth_sendRawTransaction", `"error":{"code":-32000,"message":"`+refusedSendMessages[mode]+`"}`); ok {
			p.refusedSends.Add(1)
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(answer)
			return
		}
	case NoBlockReceipts:
		if answer, ok := answerCalls(body, "eth_getBlockReceipts",
			`"error":{"code":-32601,"message":"the method eth_getBlockReceipts does not exist/is not available"}`); ok {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write(answer)
			return
		}
	case Hang:
		select {
		case <-r.Context().Done():
		case <-p.closed:
		}
		return
	case L1Priced:
		answer, err := p.l1Priced(r.Context(), body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
		return
	case Lag, NoOldState:
		answer, err := p.lagging(r.Context(), body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
		return
	}
	answer, status, err := p.post(r.Context(), body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	answer = p.withDeposits(body, answer)
	if reword := p.reword.Load(); reword != nil {
		answer = reworded(answer, *reword)
	}
	if hold != nil && callsOnlyOf(body, hold.method) {
		hold.held.Add(1)
		select {
		case <-hold.gate:
		case <-r.Context().Done():
		case <-p.closed:
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(answer)
}

func (p *Proxy) post(ctx context.Context, body []byte) ([]byte, int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, *p.upstream.Load(), bytes.NewReader(body))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	return answer, resp.StatusCode, err
}

type rpcRequest struct {
	JSONRPC string            `json:"jsonrpc"`
	ID      json.RawMessage   `json:"id"`
	Method  string            `json:"method"`
	Params  []json.RawMessage `json:"params"`
}

type rpcResponse struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   json.RawMessage `json:"error,omitempty"`
}

// lagging answers as a node whose head is lag blocks below the real one: the head, blocks
// and receipts above it do not exist yet, and "latest" state is read at its head. With the
// legacy view (and no lag) it only hides base fees.
func (p *Proxy) lagging(ctx context.Context, body []byte) ([]byte, error) {
	reqs, batch, err := parseCalls(body)
	if err != nil {
		return nil, err
	}
	realHead, err := p.head(ctx)
	if err != nil {
		return nil, err
	}
	lag := p.lagBlocks.Load()
	if Mode(p.mode.Load()) != Lag {
		lag = 0
	}
	head := uint64(0)
	if realHead > lag {
		head = realHead - lag
	}
	headHex := json.RawMessage(strconv.Quote("0x" + strconv.FormatUint(head, 16)))
	for i := range reqs {
		rewriteForHead(&reqs[i], headHex)
	}
	upstream, err := json.Marshal(reqs)
	if err != nil {
		return nil, err
	}
	answer, status, err := p.post(ctx, upstream)
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, fmt.Errorf("upstream answered %d: %s", status, answer)
	}
	var resps []rpcResponse
	if err := json.Unmarshal(answer, &resps); err != nil {
		return nil, err
	}
	byID := map[string]*rpcResponse{}
	for i := range resps {
		byID[string(resps[i].ID)] = &resps[i]
	}
	out := make([]rpcResponse, 0, len(reqs))
	for _, req := range reqs {
		resp, ok := byID[string(req.ID)]
		if !ok {
			return nil, fmt.Errorf("upstream left request %s unanswered", req.ID)
		}
		switch {
		case req.Method == "eth_blockNumber":
			resp.Result, resp.Error = headHex, nil
		case stateBeyondHead(req, head):
			// What geth answers for the state at a height it does not have yet.
			resp.Result, resp.Error = nil, json.RawMessage(`{"code":-32000,"message":"header not found"}`)
		case Mode(p.mode.Load()) == NoOldState && stateBelow(req, realHead-min(realHead, p.stateKept.Load())):
			p.oldStateRefused.Add(1)
			resp.Result, resp.Error = nil, json.RawMessage(`{"code":-32000,"message":"`+missingStateMessage+`"}`)
		case resp.Error == nil && beyondHead(req.Method, resp.Result, head):
			resp.Result = json.RawMessage("null")
		case resp.Error == nil && p.legacy.Load():
			resp.Result = withoutBaseFee(req.Method, resp.Result)
		}
		out = append(out, *resp)
	}
	if !batch {
		return json.Marshal(out[0])
	}
	return json.Marshal(out)
}

// blockParamAt is where each method that names a block takes it: first for a block or a
// header, second for an account's state at a block, third for a storage slot's.
var blockParamAt = map[string]int{"eth_getBlockByNumber": 0, "eth_getHeaderByNumber": 0, "eth_getTransactionCount": 1, "eth_getBalance": 1, "eth_getCode": 1,
	"eth_getStorageAt": 2}

// rewriteForHead points "latest"-style block tags at the lagging head. Heights above it
// need no rewriting: their answers are replaced by null (beyondHead).
func rewriteForHead(req *rpcRequest, headHex json.RawMessage) {
	i, ok := blockParamAt[req.Method]
	if !ok || len(req.Params) <= i {
		return
	}
	var tag string
	if err := json.Unmarshal(req.Params[i], &tag); err != nil {
		return
	}
	if tag == "latest" || tag == "safe" || tag == "finalized" {
		req.Params[i] = headHex
	}
}

// withoutBaseFee drops baseFeePerGas from a block or a header.
func withoutBaseFee(method string, result json.RawMessage) json.RawMessage {
	if !describesBlock(method) {
		return result
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(result, &obj); err != nil || obj == nil {
		return result
	}
	delete(obj, "baseFeePerGas")
	out, err := json.Marshal(obj)
	if err != nil {
		return result
	}
	return out
}

// describesBlock: the method answers with a block or its header.
func describesBlock(method string) bool {
	switch method {
	case "eth_getBlockByNumber", "eth_getBlockByHash", "eth_getHeaderByNumber", "eth_getHeaderByHash":
		return true
	}
	return false
}

// stateBeyondHead: req reads an account's state at a block number above head.
func stateBeyondHead(req rpcRequest, head uint64) bool {
	i := blockParamAt[req.Method]
	if i < 1 || len(req.Params) <= i {
		return false
	}
	var number string
	if err := json.Unmarshal(req.Params[i], &number); err != nil || !strings.HasPrefix(number, "0x") {
		return false // a tag, rewritten to the head already
	}
	return hexAbove(number, head)
}

// stateBelow: req reads an account's state at a block number below lowest.
func stateBelow(req rpcRequest, lowest uint64) bool {
	i := blockParamAt[req.Method]
	if i < 1 || len(req.Params) <= i {
		return false
	}
	var number string
	if err := json.Unmarshal(req.Params[i], &number); err != nil || !strings.HasPrefix(number, "0x") {
		return false
	}
	n, err := strconv.ParseUint(strings.TrimPrefix(number, "0x"), 16, 64)
	return err == nil && n < lowest
}

// hexAbove: number, in hex, is a height above head.
func hexAbove(number string, head uint64) bool {
	n, err := strconv.ParseUint(strings.TrimPrefix(number, "0x"), 16, 64)
	return err == nil && n > head
}

// beyondHead: the answer describes a block (or a transaction in a block) above head.
func beyondHead(method string, result json.RawMessage, head uint64) bool {
	var field string
	switch {
	case describesBlock(method):
		field = "number"
	case method == "eth_getTransactionReceipt" || method == "eth_getTransactionByHash":
		field = "blockNumber"
	default:
		return false
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(result, &obj); err != nil || obj == nil {
		return false
	}
	var hexNumber string
	if err := json.Unmarshal(obj[field], &hexNumber); err != nil {
		return false
	}
	return hexAbove(hexNumber, head)
}

func (p *Proxy) head(ctx context.Context) (uint64, error) {
	answer, _, err := p.post(ctx, []byte(`{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}`))
	if err != nil {
		return 0, err
	}
	var resp struct {
		Result string `json:"result"`
	}
	if err := json.Unmarshal(answer, &resp); err != nil {
		return 0, err
	}
	n, err := strconv.ParseUint(strings.TrimPrefix(resp.Result, "0x"), 16, 64)
	if err != nil {
		return 0, errors.New("upstream head: " + string(answer))
	}
	return n, nil
}
