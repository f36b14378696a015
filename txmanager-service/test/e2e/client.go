package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
)

// Client speaks the service's public HTTP API, as an outside client would, with the same
// protobuf messages the service encodes.
type Client struct {
	baseURL func() string
	http    *http.Client
}

// NewClient talks to the service at baseURL (Service.HTTPURL).
func NewClient(baseURL string) *Client {
	return NewFollowingClient(func() string { return baseURL })
}

// NewFollowingClient talks to a service whose address can change between requests: a node
// restarted on a port the kernel picked. baseURL is asked before every request.
func NewFollowingClient(baseURL func() string) *Client {
	return &Client{baseURL: baseURL, http: &http.Client{
		Timeout:   30 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: idleConnections},
	}}
}

// idleConnections is how many connections a Client keeps open between requests: more than
// the callers any harness runs at once (bench-chain's 256). A client that keeps fewer than
// it has requests in flight closes a connection after most answers and opens a new one for
// the next request, and both ends pay a TCP handshake and the service a new connection's
// goroutine and buffers: work of the harness, not of the service it measures.
const idleConnections = 1024

// APIError is an answer other than 2xx: the HTTP status and the service's error reason.
type APIError struct {
	Status  int
	Reason  string
	Message string
	// RetryAfter is the Retry-After header, zero when absent.
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	return fmt.Sprintf("HTTP %d %s: %s", e.Status, e.Reason, e.Message)
}

// Retryable reports an answer that asks the client to come back later.
func (e *APIError) Retryable() bool {
	return e.Status == http.StatusTooManyRequests || e.Status == http.StatusServiceUnavailable ||
		e.Status == http.StatusBadGateway || e.Status == http.StatusGatewayTimeout
}

// CreateTx posts the intent. The response's Created is true for HTTP 202 (a new
// transaction) and false for 200 (a replay of an earlier request with the same requestId).
func (c *Client) CreateTx(ctx context.Context, req *v1.CreateTxRequest) (*v1.CreateTxResponse, error) {
	body, err := protojson.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encode create request: %w", err)
	}
	var out v1.CreateTxResponse
	status, err := c.do(ctx, http.MethodPost, "/api/v1/tx", body, &out)
	if err != nil {
		return nil, err
	}
	if out.GetCreated() != (status == http.StatusAccepted) {
		return nil, fmt.Errorf("create answered HTTP %d with created=%t", status, out.GetCreated())
	}
	return &out, nil
}

// CreateTxBatch posts up to 1,000 intents in one call; each is answered on its own.
func (c *Client) CreateTxBatch(ctx context.Context, reqs []*v1.CreateTxRequest) (*v1.CreateTxBatchResponse, error) {
	body, err := protojson.Marshal(&v1.CreateTxBatchRequest{Creates: reqs})
	if err != nil {
		return nil, fmt.Errorf("encode batch request: %w", err)
	}
	var out v1.CreateTxBatchResponse
	if _, err := c.do(ctx, http.MethodPost, v1.BatchPath, body, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetTx reads one transaction by id.
func (c *Client) GetTx(ctx context.Context, txID string) (*v1.Tx, error) {
	var out v1.Tx
	if _, err := c.do(ctx, http.MethodGet, "/api/v1/tx/"+url.PathEscape(txID), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetQuarantine reads whether the signer is quarantined and what the chain holds at every
// nonce the database does not know (an admin call), following the listing's pages.
func (c *Client) GetQuarantine(ctx context.Context, signer string) (*v1.Quarantine, error) {
	var all *v1.Quarantine
	from := uint64(0)
	for {
		var page v1.Quarantine
		path := "/api/v1/admin/signers/" + url.PathEscape(signer) + "/quarantine?nonces=true&from_nonce=" + strconv.FormatUint(from, 10)
		if _, err := c.do(ctx, http.MethodGet, path, nil, &page); err != nil {
			return nil, err
		}
		if all == nil {
			all = &page
		} else {
			all.UnknownNonces = append(all.UnknownNonces, page.GetUnknownNonces()...)
		}
		if page.GetNextFromNonce() == 0 {
			all.NextFromNonce = 0
			return all, nil
		}
		from = page.GetNextFromNonce()
	}
}

// ListCompletions reads one page of final results after the cursor.
func (c *Client) ListCompletions(ctx context.Context, after string, limit uint32) (*v1.ListCompletionsResponse, error) {
	q := url.Values{"after": {after}, "limit": {strconv.FormatUint(uint64(limit), 10)}}
	var out v1.ListCompletionsResponse
	if _, err := c.do(ctx, http.MethodGet, "/api/v1/tx/completions?"+q.Encode(), nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ReadCompletions pages through the completion feed from the start until it has read at
// least want completions, then reads one page more so that anything served beyond want is
// seen too. The feed serves a completion only once every older write transaction on the
// PostgreSQL cluster has ended, so an empty page means "not yet": the reader keeps polling
// from the same cursor until wait has passed and returns what it has read by then.
func (c *Client) ReadCompletions(ctx context.Context, pageSize uint32, want int, wait time.Duration) ([]*v1.Completion, error) {
	var all []*v1.Completion
	after := ""
	deadline := time.Now().Add(wait)
	for {
		page, err := c.ListCompletions(ctx, after, pageSize)
		if err != nil {
			return all, err
		}
		all = append(all, page.GetCompletions()...)
		after = page.GetNext()
		if len(page.GetCompletions()) > 0 {
			continue
		}
		if len(all) >= want || time.Now().After(deadline) {
			return all, nil
		}
		select {
		case <-ctx.Done():
			return all, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// lenientJSON lets the client read answers from a newer service with more fields.
var lenientJSON = protojson.UnmarshalOptions{DiscardUnknown: true}

func (c *Client) do(ctx context.Context, method, path string, body []byte, out proto.Message) (int, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.baseURL()+path, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s: read body: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return resp.StatusCode, decodeAPIError(resp, raw)
	}
	if err := lenientJSON.Unmarshal(raw, out); err != nil {
		return resp.StatusCode, fmt.Errorf("%s %s: decode %T: %w", method, path, out, err)
	}
	return resp.StatusCode, nil
}

// decodeAPIError reads a Kratos error body ({"code","reason","message"}); anything else
// (a proxy's HTML page) is kept as the message.
func decodeAPIError(resp *http.Response, raw []byte) *APIError {
	apiErr := &APIError{Status: resp.StatusCode}
	var body struct {
		Reason  string `json:"reason"`
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &body) == nil && (body.Reason != "" || body.Message != "") {
		apiErr.Reason, apiErr.Message = body.Reason, body.Message
	} else {
		apiErr.Message = string(bytes.TrimSpace(raw))
	}
	if secs, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && secs >= 0 {
		apiErr.RetryAfter = time.Duration(secs) * time.Second
	}
	return apiErr
}
