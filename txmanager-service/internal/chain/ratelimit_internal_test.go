package chain

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/rpc"
)

type rpcCodedError struct {
	message string
	code    int
}

func (e rpcCodedError) Error() string  { return e.message }
func (e rpcCodedError) ErrorCode() int { return e.code }

// A provider's throttling, in each of the ways providers say it, is told from a node's
// answer about the request and from other endpoint failures.
func TestRateLimitsAreToldApart(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"HTTP 429", rpc.HTTPError{StatusCode: 429, Status: "429 Too Many Requests"}, true},
		{"HTTP 429, wrapped", fmt.Errorf("latest block: %w", rpc.HTTPError{StatusCode: 429}), true},
		{"JSON-RPC -32005", rpcCodedError{"limit exceeded", -32005}, true},
		{"JSON-RPC -32090", rpcCodedError{"Too many requests, reason: call rate limit exhausted, retry in 10s", -32090}, true},
		{"JSON-RPC -32090 worded otherwise", rpcCodedError{"request throttled", -32090}, true},
		{"JSON-RPC 429", rpcCodedError{"Your app has exceeded its compute units per second capacity", 429}, true},
		{"JSON-RPC -32000 naming the rate limit", rpcCodedError{"daily request count exceeded, request rate limited", -32000}, true},
		{"HTTP 502", rpc.HTTPError{StatusCode: 502, Status: "502 Bad Gateway"}, false},
		{"Besu's gas limit above the block's, under -32005", rpcCodedError{"Transaction gas limit exceeds block gas limit", -32005}, false},
		{"Besu's batch over its size, under -32005", rpcCodedError{"Number of requests exceeds max batch size", -32005}, false},
		{"Nethermind's batch over its size, under -32005", rpcCodedError{"Batch size limit exceeded", -32005}, false},
		{"geth's limit of one account's transactions", rpcCodedError{"account limit exceeded: pooled 64 txs", -32000}, false},
		{"a node's answer", rpcCodedError{"nonce too low", -32000}, false},
		{"a contract reverting with rate-limit words", rpcCodedError{"execution reverted: RateLimiter: rate limit exceeded", 3}, false},
		{"a revert under the server error code", rpcCodedError{"execution reverted: too many requests", -32000}, false},
		{"no answer", errors.New("connection refused"), false},
		{"nil", nil, false},
	}
	for _, tc := range tests {
		if got := isRateLimited(tc.err); got != tc.want {
			t.Errorf("%s: isRateLimited = %v, want %v", tc.name, got, tc.want)
		}
		if tc.want && endpointAnswered(tc.err) {
			t.Errorf("%s: counted as the endpoint's answer; the call would not move to another endpoint", tc.name)
		}
	}
}

// The pause after a 429 is the endpoint's own Retry-After (seconds or a date), bounded;
// without one, rateLimitPause.
func TestRateLimitPauseFollowsRetryAfter(t *testing.T) {
	now := time.Now()
	tests := []struct {
		header string
		want   time.Duration
	}{
		{"7", 7 * time.Second},
		{now.Add(20 * time.Second).UTC().Format(http.TimeFormat), 20 * time.Second},
		{"3600", maxRateLimitPause},
		{"", rateLimitPause},
		{"soon", rateLimitPause},
	}
	for _, tc := range tests {
		server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if tc.header != "" {
				w.Header().Set("Retry-After", tc.header)
			}
			w.WriteHeader(http.StatusTooManyRequests)
		}))
		transport := &retryAfterTransport{next: http.DefaultTransport}
		resp, err := (&http.Client{Transport: transport}).Get(server.URL)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		server.Close()
		// An HTTP date has whole seconds, and the 429 came after now: a second either way.
		if got := transport.pause(now); got > tc.want+time.Second || got < tc.want-time.Second {
			t.Errorf("Retry-After %q: pause %s, want %s", tc.header, got, tc.want)
		}
	}
}
