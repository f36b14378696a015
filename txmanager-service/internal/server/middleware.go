package server

import (
	"fmt"

	"github.com/go-kratos/kratos/v2/log"
	"github.com/go-kratos/kratos/v2/middleware"
	"github.com/go-kratos/kratos/v2/middleware/metrics"
	"github.com/go-kratos/kratos/v2/middleware/recovery"
	"go.opentelemetry.io/otel/trace"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// Middleware is the chain every API call goes through, on HTTP and gRPC alike: recover
// from panics, trace (continuing the caller's trace, e.g. across forwarding), count and
// time the request (Kratos server metrics), take the hop count from authenticated peers
// only, authenticate, then apply the caller's rate limit.
type Middleware struct {
	chain []middleware.Middleware
}

// NewMiddleware builds the chain.
func NewMiddleware(routing conf.Routing, tp trace.TracerProvider, m *telemetry.Metrics, auth *Authenticator, limiter *RateLimiter, logger log.Logger) (*Middleware, error) {
	requests, err := metrics.DefaultRequestsCounter(m.Meter(), metrics.DefaultServerRequestsCounterName)
	if err != nil {
		return nil, fmt.Errorf("server requests counter: %w", err)
	}
	seconds, err := metrics.DefaultSecondsHistogram(m.Meter(), metrics.DefaultServerSecondsHistogramName)
	if err != nil {
		return nil, fmt.Errorf("server seconds histogram: %w", err)
	}
	return &Middleware{chain: []middleware.Middleware{
		recovery.Recovery(recovery.WithHandler(recoveryHandler(logger))),
		serverTracing(tp, telemetry.Propagator()),
		metrics.Server(metrics.WithRequests(requests), metrics.WithSeconds(seconds)),
		peerHops(routing.PeerTLS.Enabled()),
		auth.Middleware(),
		limiter.Middleware(),
	}}, nil
}
