package server

import (
	"context"
	"fmt"
	"runtime"
	"strings"

	"github.com/go-kratos/kratos/v2/log"
	"github.com/go-kratos/kratos/v2/middleware"
	"github.com/go-kratos/kratos/v2/middleware/metrics"
	"github.com/go-kratos/kratos/v2/transport"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// Middleware is the chain every API call goes through, on HTTP and gRPC alike: recover
// from panics, trace (continuing the caller's trace, e.g. across forwarding), count and
// time the request (Kratos server metrics), take the hop count from authenticated peers
// only, authenticate, apply the caller's rate limit, then refuse text a database column
// cannot hold.
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
		refuseNULs(),
	}}, nil
}

// refuseNULs refuses a request whose text fields hold a NUL character, naming the field:
// PostgreSQL's text cannot store one, so a description, a note or a request id with it
// would otherwise fail at the insert and be answered 500. A batch of creates passes: each
// create is answered on its own, and every field of a create is parsed strictly (a NUL
// refuses that create alone, the others proceed).
func refuseNULs() middleware.Middleware {
	return func(next middleware.Handler) middleware.Handler {
		return func(ctx context.Context, req any) (any, error) {
			switch req.(type) {
			case *v1.CreateTxBatchRequest, *v1.ForwardCreatesRequest:
				return next(ctx, req)
			}
			if msg, ok := req.(proto.Message); ok {
				if field := nulField(msg.ProtoReflect(), ""); field != "" {
					return nil, v1.InvalidArgument(field, "holds a NUL character, which no text field may")
				}
			}
			return next(ctx, req)
		}
	}
}

// nulField is the path of the first string field of m, nested messages and lists and maps
// included, that holds a NUL character ("" when none does).
func nulField(m protoreflect.Message, prefix string) string {
	var found string
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := prefix + fd.JSONName()
		switch {
		case fd.IsList():
			list := v.List()
			for i := range list.Len() {
				if found = nulValue(fd, list.Get(i), fmt.Sprintf("%s[%d]", name, i)); found != "" {
					return false
				}
			}
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				if strings.ContainsRune(k.String(), 0) {
					found = name
					return false
				}
				found = nulValue(fd.MapValue(), mv, name) // the key is not echoed
				return found == ""
			})
		default:
			found = nulValue(fd, v, name)
		}
		return found == ""
	})
	return found
}

func nulValue(fd protoreflect.FieldDescriptor, v protoreflect.Value, name string) string {
	switch fd.Kind() {
	case protoreflect.StringKind:
		if strings.ContainsRune(v.String(), 0) {
			return name
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return nulField(v.Message(), name+".")
	}
	return ""
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
