package chain

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/rpc"
)

// blockReceiptsHTTP asks an HTTP endpoint for blocks' receipts itself instead of through
// go-ethereum's client, for the cost of reading the answer. A block of 6,000 transfers
// answers 4 MB of JSON; the client reads a batch answer with a json.Decoder (which scans the
// whole stream once to find where it ends, copying it into its buffer as it grows), keeps
// each result as a copied json.RawMessage, and only then decodes each into its target: three
// passes and two copies, 7% of the service's CPU in bench-chain's profile. Here the answer is
// read into one kept buffer and decoded in one pass straight into the receipts
// (decodeReceiptsFast, or json.Unmarshal for an answer of an unusual shape).
// Everything else is what the client does: the same HTTP client (transport, connections
// kept alive, basic auth from the URL), the same headers, rpc.HTTPError for a non-2xx answer
// and a JSON-RPC error object per element.
type blockReceiptsHTTP struct {
	client *http.Client
	url    string
	// spare holds read buffers between polls. A sync.Pool would not do: it empties at
	// every other collection, and with a collection every few hundred milliseconds under
	// load each poll grew a fresh buffer to the answer's size (zeroing each step of the
	// way), 4% of the service's CPU in bench-chain's profile with batches of creates.
	spare chan *bytes.Buffer
}

// keptAnswerBuffers: how many read buffers a reader keeps, enough for the polls that
// overlap (the receipt schedule's and a caller's own).
const keptAnswerBuffers = 2

// receiptsAnswer is one element of a batch answer to eth_getBlockReceipts. A null result (a
// block the node does not have yet) decodes to a nil slice, an empty block to an empty one.
type receiptsAnswer struct {
	ID     json.RawMessage `json:"id"`
	Error  *jsonRPCError   `json:"error"`
	Result []*rpcReceipt   `json:"result"`
}

// jsonRPCError is a JSON-RPC error object; it satisfies rpc.Error and rpc.DataError as the
// client's own does, so classification (classify.go) reads it the same way.
type jsonRPCError struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *jsonRPCError) Error() string {
	if e.Message == "" {
		return "json-rpc error " + strconv.Itoa(e.Code)
	}
	return e.Message
}

// ErrorCode implements rpc.Error.
func (e *jsonRPCError) ErrorCode() int { return e.Code }

// ErrorData implements rpc.DataError.
func (e *jsonRPCError) ErrorData() any {
	if len(e.Data) == 0 {
		return nil
	}
	var data any
	if err := json.Unmarshal(e.Data, &data); err != nil {
		return string(e.Data)
	}
	return data
}

var (
	_ rpc.Error     = (*jsonRPCError)(nil)
	_ rpc.DataError = (*jsonRPCError)(nil)
)

// errMissingAnswer: the node's batch answer had no element for a request (the client's
// rpc.ErrMissingBatchResponse, which is not exported as a value to match).
var errMissingAnswer = errors.New("response batch did not contain a response to this call")

// maxKeptAnswerBuffer: a buffer grown past this (an unusually large block) is left to the
// garbage collector rather than kept for the next poll.
const maxKeptAnswerBuffer = 64 << 20

// fetch asks for the receipts of blocks in one batch request. It returns one slice per block
// (nil: not at that height yet) and one error per block (a JSON-RPC error object, or no
// answer for it); the error returned is for the request as a whole.
func (h *blockReceiptsHTTP) fetch(ctx context.Context, blocks []uint64) ([][]*rpcReceipt, []error, error) {
	body := make([]byte, 0, 96*len(blocks))
	body = append(body, '[')
	for i, n := range blocks {
		if i > 0 {
			body = append(body, ',')
		}
		body = append(body, `{"jsonrpc":"2.0","id":`...)
		body = strconv.AppendInt(body, int64(i), 10)
		body = append(body, `,"method":"eth_getBlockReceipts","params":["`...)
		body = append(body, hexutil.EncodeUint64(n)...)
		body = append(body, `"]}`...)
	}
	body = append(body, ']')
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	buf := h.takeBuffer()
	defer h.keepBuffer(buf)
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return nil, nil, err
	}
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		return nil, nil, rpc.HTTPError{Status: resp.Status, StatusCode: resp.StatusCode, Body: bytes.Clone(buf.Bytes())}
	}
	return decodeReceiptsAnswer(buf.Bytes(), len(blocks))
}

// takeBuffer is an empty read buffer, one kept from an earlier answer if any is free.
func (h *blockReceiptsHTTP) takeBuffer() *bytes.Buffer {
	select {
	case buf := <-h.spare:
		buf.Reset()
		return buf
	default:
		return new(bytes.Buffer)
	}
}

// keepBuffer keeps buf for the next answer unless enough are kept already or it grew past
// maxKeptAnswerBuffer. The decoded receipts hold no reference into it.
func (h *blockReceiptsHTTP) keepBuffer(buf *bytes.Buffer) {
	if buf.Cap() > maxKeptAnswerBuffer {
		return
	}
	select {
	case h.spare <- buf:
	default:
	}
}

// decodeReceiptsAnswer reads a batch answer of n eth_getBlockReceipts calls whose ids were
// their positions, in one pass whatever order the node answered in (JSON-RPC lets it
// reorder a batch); each answer is matched to its call by id.
func decodeReceiptsAnswer(body []byte, n int) ([][]*rpcReceipt, []error, error) {
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	if len(trimmed) > 0 && trimmed[0] == '{' {
		// One object for the whole batch: an error the node gave instead of answers.
		var single receiptsAnswer
		if err := json.Unmarshal(trimmed, &single); err != nil {
			return nil, nil, fmt.Errorf("reading the node's answer: %w", err)
		}
		if single.Error != nil {
			return nil, nil, single.Error
		}
		return nil, nil, errors.New("the node answered a batch request with a single result")
	}
	answers, ok := decodeReceiptsFast(body)
	if !ok {
		if err := json.Unmarshal(body, &answers); err != nil {
			return nil, nil, fmt.Errorf("reading the node's answer: %w", err)
		}
	}
	results, errs := make([][]*rpcReceipt, n), make([]error, n)
	answered := make([]bool, n)
	for i := range answers {
		id, err := strconv.Atoi(string(answers[i].ID))
		if err != nil || id < 0 || id >= n || answered[id] {
			continue // not one of ours: the client ignores those too
		}
		answered[id] = true
		if answers[i].Error != nil {
			errs[id] = answers[i].Error
			continue
		}
		results[id] = answers[i].Result
	}
	for i, ok := range answered {
		if !ok {
			errs[i] = errMissingAnswer
		}
	}
	return results, errs, nil
}

// receiptsOverHTTP is the direct reader for an http(s) endpoint DialRPC made a client for,
// nil for any other (websocket, IPC, an in-process client).
func receiptsOverHTTP(rawURL string, client *http.Client) *blockReceiptsHTTP {
	if !isHTTPURL(rawURL) {
		return nil
	}
	return &blockReceiptsHTTP{client: client, url: rawURL, spare: make(chan *bytes.Buffer, keptAnswerBuffers)}
}

func isHTTPURL(rawURL string) bool {
	scheme, _, found := strings.Cut(rawURL, "://")
	return found && (strings.EqualFold(scheme, "http") || strings.EqualFold(scheme, "https"))
}
