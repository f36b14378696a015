package server

import (
	"context"
	"errors"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// Streams ends the service's open gRPC streams when it stops, and holds each credential to
// its share of them. A stream (WatchCompletions) lasts as long as its client stays, and
// gRPC's graceful stop waits for every call to end, so without this one connected watcher
// would hold the whole shutdown for ever. Ended streams leave their clients to resume from
// their cursor on another node, or here after a restart.
type Streams struct {
	ctx     context.Context
	close   context.CancelFunc
	limiter *RateLimiter
	// maxPerCredential: a stream holds a goroutine and a database read each poll for as long
	// as it stays, so one credential's open streams are capped, not only the rate it opens them.
	maxPerCredential int

	mu   sync.Mutex
	open map[string]int
}

// NewStreams is the set of streams of one server's lifetime.
func NewStreams(c conf.Server, limiter *RateLimiter) *Streams {
	ctx, cancel := context.WithCancel(context.Background())
	return &Streams{ctx: ctx, close: cancel, limiter: limiter, maxPerCredential: c.MaxStreamsPerCredential, open: map[string]int{}}
}

// Close ends every open stream, and every stream opened from now on, at once.
func (s *Streams) Close() { s.close() }

// interceptor gives each stream a context that Close cancels.
func (s *Streams) interceptor(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx, cancel := context.WithCancel(ss.Context())
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel)
	defer stop()
	return handler(srv, &contextStream{ServerStream: ss, ctx: ctx})
}

// limits runs after authentication: opening a stream costs its credential one request of
// its rate, and a credential holds at most maxPerCredential streams open on this node.
func (s *Streams) limits(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if isHealthCheck(info.FullMethod) {
		return handler(srv, ss)
	}
	p, _ := domain.PrincipalFrom(ss.Context())
	if err := s.limiter.refuse(ss.Context(), p.ID, 1); err != nil {
		return withGRPCCode(err)
	}
	if !s.acquire(p.ID) {
		return withGRPCCode(v1.ErrorRateLimited("this credential already holds %d open streams on this node; close one first", s.maxPerCredential))
	}
	defer s.release(p.ID)
	// Headers now, not with the first completion: they tell the client the stream was
	// accepted, so that an UNAUTHENTICATED end later (its token expired) is told from a
	// refusal at the door.
	if err := ss.SendHeader(metadata.MD{}); err != nil {
		return err
	}
	return handler(srv, ss)
}

func (s *Streams) acquire(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[id] >= s.maxPerCredential {
		return false
	}
	s.open[id]++
	return true
}

func (s *Streams) release(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open[id]--; s.open[id] <= 0 {
		delete(s.open, id)
	}
}

// errCredentialExpired ends a stream whose credential expired while it was open.
var errCredentialExpired = errors.New("the stream's credential expired")

// untilExpiry ends a stream when the credential that opened it expires: a token is checked
// once, when the stream opens, and must not keep serving its holder past its expiry.
func untilExpiry(ctx context.Context, p domain.Principal) (context.Context, context.CancelFunc) {
	if p.ExpiresAt.IsZero() {
		return context.WithCancel(ctx)
	}
	return context.WithDeadlineCause(ctx, p.ExpiresAt, errCredentialExpired)
}

// contextStream is a stream with another context (a principal, a shutdown).
type contextStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *contextStream) Context() context.Context { return s.ctx }
