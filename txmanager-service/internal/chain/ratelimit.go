package chain

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ethereum/go-ethereum/rpc"
)

// A hosted provider over its limit answers HTTP 429 (with Retry-After), or a JSON-RPC error
// (-32005 "limit exceeded", -32090, or 429 and words like "rate limit" in the message). Either is a
// fault of the endpoint, not an answer about the request: the call moves to another
// endpoint, and this one is left alone until its Retry-After (or rateLimitPause) has passed.

// rateLimitPause is how long an endpoint that limited us without saying for how long is
// left alone.
const rateLimitPause = time.Second

// JSON-RPC error codes: EIP-1474's "limit exceeded", the code some providers give their
// throttling instead ("Too many requests, reason: call rate limit exhausted"), and the
// generic server and internal errors under which providers put their throttling words.
const (
	codeLimitExceeded = -32005
	codeTooManyCalls  = -32090
	codeServerError   = -32000
	codeInternalError = -32603
)

// rateLimitPhrases are words providers put in a JSON-RPC error when they throttle.
var rateLimitPhrases = []string{"rate limit", "too many requests", "limit exceeded", "exceeded its compute units", "request rate"}

// isRateLimited reports whether err is an endpoint refusing because of its request rate.
func isRateLimited(err error) bool {
	if err == nil {
		return false
	}
	var httpErr rpc.HTTPError
	if errors.As(err, &httpErr) {
		return httpErr.StatusCode == http.StatusTooManyRequests
	}
	var rpcErr rpc.Error
	if !errors.As(err, &rpcErr) {
		return false
	}
	code := rpcErr.ErrorCode()
	// A node's own answer about the request is never throttling, whatever its code: Besu
	// answers a gas limit above the block's, and a batch over its size, under -32005 too.
	if answersTheRequest(rpcErr.Error()) {
		return false
	}
	if code == codeLimitExceeded || code == codeTooManyCalls || code == http.StatusTooManyRequests {
		return true
	}
	// Words alone only from the codes providers answer with: a contract may revert with
	// "rate limit exceeded" (code 3, with revert data), and that is an answer about the call.
	var dataErr rpc.DataError
	if (code != codeServerError && code != codeInternalError) || (errors.As(err, &dataErr) && dataErr.ErrorData() != nil) {
		return false
	}
	message := strings.ToLower(rpcErr.Error())
	if strings.Contains(message, "revert") {
		return false
	}
	for _, phrase := range rateLimitPhrases {
		if strings.Contains(message, phrase) {
			return true
		}
	}
	return false
}

// answersTheRequest is whether message is a node's answer about the request or its batch:
// one of the broadcast answers, or a batch refused for its size.
func answersTheRequest(message string) bool {
	return matchPhrase(message, sendErrorPhrases) != nil || refusesBatchSize(message)
}

// throttledBatch is the first element of a batch a provider refused for its request rate:
// it said nothing about that element's request, so the whole batch goes to another endpoint
// (a broadcast the first one took answers "already known" there).
func throttledBatch(elems []rpc.BatchElem) error {
	for _, elem := range elems {
		if isRateLimited(elem.Error) {
			return fmt.Errorf("%s: %w", elem.Method, elem.Error)
		}
	}
	return nil
}

// retryAfterTransport remembers the Retry-After of the last 429 an endpoint answered, which
// the JSON-RPC client does not pass on.
type retryAfterTransport struct {
	next http.RoundTripper
	// until is when the endpoint said it would take requests again (Unix nanoseconds).
	until atomic.Int64
}

func (t *retryAfterTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusTooManyRequests {
		if wait, ok := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			t.until.Store(time.Now().Add(wait).UnixNano())
		}
	}
	return resp, err
}

// pause is how long to leave the endpoint alone after it limited us.
func (t *retryAfterTransport) pause(now time.Time) time.Duration {
	if t == nil {
		return rateLimitPause
	}
	if wait := time.Duration(t.until.Load() - now.UnixNano()); wait > 0 {
		return min(wait, maxRateLimitPause)
	}
	return rateLimitPause
}

// maxRateLimitPause bounds a Retry-After: a provider asking for an hour is probed again
// sooner, in case it is the only endpoint.
const maxRateLimitPause = time.Minute

// parseRetryAfter reads a Retry-After header: seconds, or an HTTP date.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.Atoi(v); err == nil && secs >= 0 {
		return time.Duration(secs) * time.Second, true
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(at.Sub(now), 0), true
	}
	return 0, false
}

// batchTooLargePhrases are how endpoints refuse a batch for its size: go-ethereum answers
// the first call "batch too large" (and the others get no answer), providers word it
// "batch size too large", "batch limit exceeded" or "too many requests in batch"; Besu
// "Number of requests exceeds max batch size" and Nethermind "Batch size limit exceeded",
// both under -32005, the code of a rate limit.
var batchTooLargePhrases = []string{"batch too large", "batch size too large", "batch size exceeds", "batch limit", "too many requests in batch",
	"request entity too large", "exceeds max batch size", "batch size limit"}

// batchTooLarge reports whether the endpoint refused the batch for its size: HTTP 413, or
// a call answered with one of batchTooLargePhrases.
func batchTooLarge(err error, elems []rpc.BatchElem) bool {
	var httpErr rpc.HTTPError
	if errors.As(err, &httpErr) && httpErr.StatusCode == http.StatusRequestEntityTooLarge {
		return true
	}
	for _, e := range elems {
		if e.Error != nil && refusesBatchSize(e.Error.Error()) {
			return true
		}
	}
	return false
}

// refusesBatchSize: message says one of batchTooLargePhrases.
func refusesBatchSize(message string) bool {
	message = strings.ToLower(message)
	for _, phrase := range batchTooLargePhrases {
		if strings.Contains(message, phrase) {
			return true
		}
	}
	return false
}
