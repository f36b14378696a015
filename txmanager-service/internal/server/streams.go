package server

import (
	"context"

	"google.golang.org/grpc"
)

// Streams ends the service's open gRPC streams when it stops. A stream (WatchCompletions)
// lasts as long as its client stays, and gRPC's graceful stop waits for every call to end,
// so without this one connected watcher would hold the whole shutdown for ever. Ended
// streams leave their clients to resume from their cursor on another node, or here after
// a restart.
type Streams struct {
	ctx   context.Context
	close context.CancelFunc
}

// NewStreams is the set of streams of one server's lifetime.
func NewStreams() *Streams {
	ctx, cancel := context.WithCancel(context.Background())
	return &Streams{ctx: ctx, close: cancel}
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

// contextStream is a stream with another context (a principal, a shutdown).
type contextStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *contextStream) Context() context.Context { return s.ctx }
