package chain

import (
	"cmp"
	"context"
	"errors"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/rpc"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// EndpointHealth is what is known about one endpoint: whether it answered lately, the
// highest head it reported, and whether it serves another chain than the one configured.
type EndpointHealth struct {
	Name string
	// Reachable: no call or probe failed since one sent after the latest failed one was
	// answered (an endpoint never tried counts as reachable, so a fresh start does not
	// refuse every call).
	Reachable bool
	// Head is the latest block number it reported; 0 while unknown.
	Head uint64
	// WrongChain: it reported another chain id or genesis; it is never used again.
	WrongChain bool
	// LastError is its latest failure, for operators.
	LastError string
	// LimitedUntil is when an endpoint that throttled us is asked again (probes included).
	LimitedUntil time.Time
	// failedSent is when the latest call or probe that failed was sent: only an answer to
	// one sent after it says the endpoint answers again.
	failedSent time.Time
}

// callOrder is the order in which endpoints are tried for a call: first those in step with
// the best head (within maxLag blocks), in configured order; then reachable ones that lag,
// highest head first. Unreachable endpoints and those on another chain are left out, so a
// call fails fast while no endpoint answers; the prober brings them back.
func callOrder(endpoints []EndpointHealth, maxLag uint64) []int {
	var best uint64
	for _, e := range endpoints {
		if e.Reachable && !e.WrongChain {
			best = max(best, e.Head)
		}
	}
	var current, lagging []int
	for i, e := range endpoints {
		switch {
		case !e.Reachable || e.WrongChain:
		case e.Head == 0 || e.Head+maxLag >= best:
			current = append(current, i)
		default:
			lagging = append(lagging, i)
		}
	}
	slices.SortStableFunc(lagging, func(a, b int) int { return cmp.Compare(endpoints[b].Head, endpoints[a].Head) })
	return append(current, lagging...)
}

// endpointAnswered tells a failure of the endpoint (no answer in time, connection refused,
// an HTTP error, a garbled reply: try another endpoint) from an answer about the request
// (a JSON-RPC error object, a revert, an unknown transaction: another endpoint would say
// the same).
func endpointAnswered(err error) bool {
	if err == nil {
		return true
	}
	if isRateLimited(err) {
		return false
	}
	var httpErr rpc.HTTPError
	if errors.As(err, &httpErr) {
		return false
	}
	var rpcErr rpc.Error
	if errors.As(err, &rpcErr) {
		return true
	}
	return services.IsNodeAnswer(err)
}

// EndpointName names an endpoint in logs and metrics without its path or query, where
// hosted providers put API keys (https://mainnet.example.io/v3/<key>).
func EndpointName(index int, raw string) string {
	prefix := strconv.Itoa(index) + ":"
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return prefix + "endpoint"
	}
	name := prefix + u.Scheme + "://" + u.Host
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		name += "/…"
	}
	return name
}

// withoutURL hides an endpoint's address in err behind its name: Go's HTTP client puts
// the whole URL into a transport failure (Post "https://host/v3/<key>": ...), and
// providers put their API keys in the path. Such errors are logged, stored on
// transactions and shown to API callers. Any other URL in err is told by its host alone:
// an endpoint's own answer may name one, as a gateway whose provider failed answers 502
// with Go's error naming the provider's address, key and all.
//
// The errors that wrap the address have their text made already (fmt.Errorf), so the
// text is rewritten on top of them; errors.Is and errors.As still see the chain below.
func withoutURL(err error, name string) error {
	if err == nil {
		return nil
	}
	var urlErr *url.Error
	if !errors.As(err, &urlErr) || urlErr.URL == name {
		return domain.WithoutURLs(err)
	}
	address := urlErr.URL
	urlErr.URL = name
	return &redactedError{msg: domain.RedactURLs(strings.ReplaceAll(err.Error(), address, name)), err: err}
}

// redactedError is err told without an address in it.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// callerGaveUp: the caller's own context ended, so a failed call says nothing about the
// endpoint.
func callerGaveUp(ctx context.Context) bool { return ctx.Err() != nil }
