package server

import (
	"context"
	"fmt"
	"runtime"

	"github.com/go-kratos/kratos/v2/log"
	"github.com/go-kratos/kratos/v2/middleware"
	"github.com/go-kratos/kratos/v2/middleware/metrics"
	"github.com/go-kratos/kratos/v2/transport"
	"go.opentelemetry.io/otel/trace"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
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
		recovered(logger),
		serverTracing(tp, telemetry.Propagator()),
		metrics.Server(metrics.WithRequests(requests), metrics.WithSeconds(seconds)),
		peerHops(routing),
		auth.Middleware(),
		limiter.Middleware(),
	}}, nil
}

// recovered answers a panic while serving a request with INTERNAL and logs it with its
// stack, the operation and the panic, but not the request: Kratos' own recovery logs the
// request whole, and requests carry secrets (a webhook's signing secret, a policy's notes).
func recovered(logger log.Logger) middleware.Middleware {
	helper := log.NewHelper(logger)
	return func(next middleware.Handler) middleware.Handler {
		return func(ctx context.Context, req any) (reply any, err error) {
			defer func() {
				if panicValue := recover(); panicValue != nil {
					stack := make([]byte, 64<<10)
					stack = stack[:runtime.Stack(stack, false)]
					operation := ""
					if info, ok := transport.FromServerContext(ctx); ok {
						operation = info.Operation()
					}
					helper.Errorw("msg", "panic while serving a request", "operation", operation, "panic", fmt.Sprint(panicValue), "stack", string(stack))
					reply, err = nil, v1.ErrorInternal("internal error")
				}
			}()
			return next(ctx, req)
		}
	}
}
