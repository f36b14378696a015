package server

import (
	"context"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/go-kratos/kratos/v2/middleware"
	"github.com/go-kratos/kratos/v2/transport"
	"golang.org/x/time/rate"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/console"
	"github.com/bionicotaku/txmanager-service/internal/controllers"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// peerHops takes the forwarding hop count from requests that really come from a peer: in
// forward mode (in basic mode no node forwards, so no request is a forwarded one), over
// gRPC (nodes forward only over gRPC) and, with routing.peerTLS, only on a connection whose
// client certificate the peer CA issued. Anyone else's x-txm-hops header is ignored, so a
// caller can neither stop forwarding nor pass as a forwarded request (which the rate limit
// lets through, and which may use ForwardCreates).
func peerHops(routing conf.Routing) middleware.Middleware {
	forwarding, requireCertificate := routing.Mode == conf.RoutingForward, routing.PeerTLS.Enabled()
	return func(next middleware.Handler) middleware.Handler {
		return func(ctx context.Context, req any) (any, error) {
			tr, ok := transport.FromServerContext(ctx)
			if forwarding && ok && tr.Kind() == transport.KindGRPC && (!requireCertificate || verifiedPeer(ctx)) {
				if n, err := strconv.Atoi(tr.RequestHeader().Get(controllers.HopsHeader)); err == nil && n > 0 {
					ctx = controllers.WithHops(ctx, n)
				}
			}
			return next(ctx, req)
		}
	}
}

// verifiedPeer: the gRPC connection presented a client certificate that verified against
// the peer CA (the server asks for one and verifies any it gets).
func verifiedPeer(ctx context.Context) bool {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return false
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	return ok && len(info.State.VerifiedChains) > 0
}

// RateLimiter is a token bucket per credential (server.rateLimit). Requests a peer
// forwarded were counted on the node that received them and pass.
type RateLimiter struct {
	enabled bool
	limit   rate.Limit
	burst   int
	// idleAfter: a bucket unused this long has refilled completely, so dropping it changes
	// nothing; that keeps the map as small as the set of recently active callers.
	idleAfter time.Duration
	metrics   *telemetry.Metrics

	mu        sync.Mutex
	buckets   map[string]*bucket
	lastSweep time.Time
}

type bucket struct {
	limiter  *rate.Limiter
	lastUsed time.Time
}

// NewRateLimiter builds the limiter from configuration (a no-op when disabled).
func NewRateLimiter(c conf.Server, metrics *telemetry.Metrics) *RateLimiter {
	rl := c.RateLimit
	l := &RateLimiter{enabled: rl.Enabled, metrics: metrics, buckets: map[string]*bucket{}}
	if l.enabled {
		l.limit, l.burst = rate.Limit(rl.RequestsPerSecond), rl.Burst
		l.idleAfter = time.Duration(float64(rl.Burst)/rl.RequestsPerSecond*float64(time.Second)) + time.Second
	}
	return l
}

// Middleware refuses a request beyond its credential's rate with 429 RATE_LIMITED and the
// time after which one more request will pass.
func (l *RateLimiter) Middleware() middleware.Middleware {
	return func(next middleware.Handler) middleware.Handler {
		if !l.enabled {
			return next
		}
		return func(ctx context.Context, req any) (any, error) {
			if controllers.Hops(ctx) > 0 {
				return next(ctx, req)
			}
			// Health checks carry no credential: counted, every probe and balancer of the
			// deployment would share one bucket that any caller without credentials drains.
			if tr, ok := transport.FromServerContext(ctx); ok && isHealthCheck(tr.Operation()) {
				return next(ctx, req)
			}
			p, _ := domain.PrincipalFrom(ctx)
			if err := l.refuse(ctx, p.ID, creates(req)); err != nil {
				return nil, err
			}
			return next(ctx, req)
		}
	}
}

// refuse charges a request of n creates to credential id: nil when it passes, else
// RATE_LIMITED with the time after which one more request will pass.
func (l *RateLimiter) refuse(ctx context.Context, id string, n int) error {
	seconds := l.waitSeconds(ctx, id, n)
	if seconds == 0 {
		return nil
	}
	return v1.ErrorRateLimited("rate limit of this credential exceeded; retry after Retry-After seconds").
		WithMetadata(map[string]string{controllers.MetadataRetryAfter: strconv.Itoa(seconds)})
}

// waitSeconds charges n to credential id: 0 when the request passes, else the whole seconds
// after which one more will (the refusal counted).
func (l *RateLimiter) waitSeconds(ctx context.Context, id string, n int) int {
	if !l.enabled {
		return 0
	}
	wait := l.reserve(id, time.Now(), n)
	if wait <= 0 {
		return 0
	}
	l.metrics.RateLimited(ctx)
	return int(math.Ceil(wait.Seconds()))
}

// creates is what a request costs of its credential's rate: a batch costs each of its
// creates, up to the most a batch may carry (a larger one is refused whole, and costs no
// more than the largest that is served).
func creates(req any) int {
	if batch, ok := req.(*v1.CreateTxBatchRequest); ok {
		return min(max(len(batch.GetCreates()), 1), controllers.MaxBatchCreates)
	}
	return 1
}

// reserve takes n tokens for id, or returns how long until the request may pass (taking
// none). A request that costs more than the burst passes when the bucket is full and leaves
// it in debt for the rest: refused until the rate has paid it, a batch of 1,000 costs its
// credential as much as 1,000 single creates, and is still never refused for ever.
func (l *RateLimiter) reserve(id string, now time.Time, n int) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.lastSweep) > l.idleAfter {
		for key, b := range l.buckets {
			if now.Sub(b.lastUsed) > l.idleAfter {
				delete(l.buckets, key)
			}
		}
		l.lastSweep = now
	}
	b, ok := l.buckets[id]
	if !ok {
		b = &bucket{limiter: rate.NewLimiter(l.limit, l.burst)}
		l.buckets[id] = b
	}
	b.lastUsed = now
	r := b.limiter.ReserveN(now, min(n, l.burst))
	if wait := r.DelayFrom(now); wait > 0 {
		r.CancelAt(now)
		return wait
	}
	// The debt: reservations kept with their delay make the bucket's later requests wait.
	for rest := n - l.burst; rest > 0; rest -= l.burst {
		b.limiter.ReserveN(now, min(rest, l.burst))
	}
	if debt := n - l.burst; debt > 0 {
		// Not swept as idle (forgiven) before the debt is paid.
		b.lastUsed = now.Add(time.Duration(float64(debt) / float64(l.limit) * float64(time.Second)))
	}
	return 0
}

// consoleAuth authenticates a console request as the API does, and charges it to its
// credential's rate: the console reads the same services, and must not be a way around the
// limit.
func (l *RateLimiter) consoleAuth(authenticate func(header func(string) string) (domain.Principal, error)) console.Authenticate {
	return func(header func(string) string) (domain.Principal, error) {
		p, err := authenticate(header)
		if err != nil {
			return p, err
		}
		if seconds := l.waitSeconds(context.Background(), p.ID, 1); seconds > 0 {
			return domain.Principal{}, &console.RateLimitedError{RetryAfterSeconds: seconds}
		}
		return p, nil
	}
}
