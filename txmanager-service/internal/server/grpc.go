package server

import (
	"context"
	"errors"
	"net/http"
	"time"

	kerrors "github.com/go-kratos/kratos/v2/errors"
	kgrpc "github.com/go-kratos/kratos/v2/transport/grpc"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	gproto "google.golang.org/grpc/encoding/proto"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/controllers"
	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// NewGRPCServer serves the API over gRPC.
func NewGRPCServer(c conf.Server, listeners *Listeners, tlsConfigs *TLSConfigs, tx *controllers.TxController, admin *controllers.AdminController,
	mw *Middleware, auth *Authenticator, streams *Streams, health *Health) *kgrpc.Server {
	opts := []kgrpc.ServerOption{
		// Kratos' own health service answers SERVING whatever the database and the chain say.
		kgrpc.CustomHealth(),
		kgrpc.Listener(listeners.GRPC),
		kgrpc.Timeout(c.GRPC.Timeout.Std()),
		kgrpc.Middleware(mw.chain...),
		kgrpc.UnaryInterceptor(grpcStatusInterceptor, messageSizeInterceptor(c.MaxBodyBytes)),
		// Kratos middleware runs per unary call; a stream (WatchCompletions) is authenticated
		// and counted once, when it opens, and ended when its credential expires or the
		// service stops.
		kgrpc.StreamInterceptor(streams.interceptor, auth.streamInterceptor, streams.limits),
		// A batch of creates may be larger than any other call; messageSizeInterceptor holds
		// the others to maxBodyBytes.
		kgrpc.Options(grpc.MaxRecvMsgSize(int(max(c.MaxBodyBytes, c.MaxBatchBodyBytes))),
			grpc.ForceServerCodecV2(readableCodec{CodecV2: encoding.GetCodecV2(gproto.Name)}),
			// Clients ping idle connections (the Go client every 20s) so that a stream on a
			// route dropped without a word ends; gRPC's default answers pings more often
			// than every 5 minutes by closing the connection. The service pings too, and
			// closes a connection that does not answer: its streams are counted against
			// their credential's limit until then.
			grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepAliveMinTime, PermitWithoutStream: true}),
			grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second})),
	}
	if tlsConfigs.GRPC != nil {
		opts = append(opts, kgrpc.TLSConfig(tlsConfigs.GRPC))
	}
	srv := kgrpc.NewServer(opts...)
	srv.RegisterService(answeringBadMessages(&v1.TxService_ServiceDesc), tx)
	srv.RegisterService(answeringBadMessages(&v1.AdminService_ServiceDesc), admin)
	srv.RegisterService(answeringBadMessages(&v1.PeerService_ServiceDesc), &peerService{tx: tx})
	healthpb.RegisterHealthServer(srv, newGRPCHealth(health, streams.ctx.Done(), v1.TxService_ServiceDesc.ServiceName, v1.AdminService_ServiceDesc.ServiceName))
	return srv
}

// keepAliveMinTime is the shortest interval between a client's pings the service takes.
const keepAliveMinTime = 5 * time.Second

// answeringBadMessages is desc with each call's request message, when it cannot be read,
// refused as the HTTP API refuses such a body: INVALID_ARGUMENT with the reason (gRPC itself
// answers INTERNAL, as if the service had failed, for a string field that is not UTF-8 or
// bytes that are not protobuf). gRPC writes that answer inside RecvMsg, before any
// interceptor or handler sees the failure, so the handlers read through readableCodec.
func answeringBadMessages(desc *grpc.ServiceDesc) *grpc.ServiceDesc {
	answered := *desc
	answered.Methods = make([]grpc.MethodDesc, len(desc.Methods))
	for i, method := range desc.Methods {
		handler := method.Handler
		method.Handler = func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			return handler(srv, ctx, func(msg any) error { return readMessage(dec, msg) }, interceptor)
		}
		answered.Methods[i] = method
	}
	answered.Streams = make([]grpc.StreamDesc, len(desc.Streams))
	for i, stream := range desc.Streams {
		handler := stream.Handler
		stream.Handler = func(srv any, ss grpc.ServerStream) error {
			return handler(srv, &answeringStream{ServerStream: ss})
		}
		answered.Streams[i] = stream
	}
	return &answered
}

// answeringStream reads a stream's messages as answeringBadMessages reads a call's.
type answeringStream struct {
	grpc.ServerStream
}

func (s *answeringStream) RecvMsg(msg any) error {
	return readMessage(s.ServerStream.RecvMsg, msg)
}

// readMessage receives msg with recv and refuses it when it cannot be read. A message over
// the size limit is refused by gRPC before it is read, RESOURCE_EXHAUSTED as gRPC answers it.
func readMessage(recv func(any) error, msg any) error {
	in := &incoming{msg: msg}
	if err := recv(in); err != nil {
		return err
	}
	if in.err != nil {
		return withGRPCCode(v1.InvalidArgument("message", "cannot be read as protobuf: "+in.err.Error()))
	}
	return nil
}

// incoming is a request message on its way to its handler: readableCodec reads into msg,
// and keeps in err why it could not.
type incoming struct {
	msg any
	err error
}

// readableCodec is gRPC's protobuf codec, except that it hands a request message it cannot
// read to the handler as incoming.err instead of failing the read: gRPC would answer that
// failure INTERNAL itself. Messages not on their way through readMessage (the health and
// reflection services') are read as gRPC reads them. It is the server's only codec (a call
// sent as grpc+json is read as protobuf). Whatever sees a request on its way in below the
// handler sees the *incoming around it: a stats handler's InPayload, and Kratos stream
// middleware (neither is configured); unary middleware and interceptors see the message.
type readableCodec struct {
	encoding.CodecV2
}

func (c readableCodec) Unmarshal(data mem.BufferSlice, v any) error {
	in, ok := v.(*incoming)
	if !ok {
		return c.CodecV2.Unmarshal(data, v)
	}
	in.err = c.CodecV2.Unmarshal(data, in.msg)
	return nil
}

// Kratos sends 422 and 410 as gRPC Unknown; the service sends them as codes no other API
// status maps to, and a forwarding node reads them back (see fromPeer).
var grpcCodeOf = map[int]codes.Code{
	http.StatusUnprocessableEntity: codes.FailedPrecondition,
	http.StatusGone:                codes.OutOfRange,
}

// batchMethods carry many creates a call, each held to maxBodyBytes where it came in: a
// client's batch, or the creates another node forwards to this signer's owner (packed up to
// forwardBatchBytes, more than a small maxBodyBytes).
var batchMethods = map[string]bool{v1.TxService_CreateTxBatch_FullMethodName: true, v1.PeerService_ForwardCreates_FullMethodName: true}

// messageSizeInterceptor refuses a call other than a batch of creates whose message is over
// maxBytes, as the HTTP API refuses such a body.
func messageSizeInterceptor(maxBytes int64) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if msg, ok := req.(proto.Message); ok && !batchMethods[info.FullMethod] && int64(proto.Size(msg)) > maxBytes {
			return nil, withGRPCCode(v1.RequestTooLarge(maxBytes))
		}
		return handler(ctx, req)
	}
}

func grpcStatusInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	resp, err := handler(ctx, req)
	return resp, withGRPCCode(err)
}

// streamInterceptor authenticates a stream from its opening headers and gives its handler
// the caller's principal.
func (a *Authenticator) streamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if isHealthCheck(info.FullMethod) {
		return handler(srv, ss)
	}
	p, err := a.authenticate(ss.Context())
	if err != nil {
		return withGRPCCode(err)
	}
	ctx, cancel := untilExpiry(domain.WithPrincipal(ss.Context(), p), p)
	defer cancel()
	err = handler(srv, &contextStream{ServerStream: ss, ctx: ctx})
	if errors.Is(context.Cause(ctx), errCredentialExpired) {
		return withGRPCCode(unauthenticated("the credential that opened this stream expired; open it again with a new one"))
	}
	return withGRPCCode(err)
}

func withGRPCCode(err error) error {
	var kerr *kerrors.Error
	if err == nil || !errors.As(err, &kerr) {
		return err
	}
	code, ok := grpcCodeOf[int(kerr.Code)]
	if !ok {
		return err
	}
	// The reason and metadata travel unchanged in ErrorInfo.
	st, detailErr := status.New(code, kerr.Message).WithDetails(&errdetails.ErrorInfo{Reason: kerr.Reason, Metadata: kerr.Metadata})
	if detailErr != nil {
		return err
	}
	return st.Err()
}
