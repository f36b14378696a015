package server

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	kerrors "github.com/go-kratos/kratos/v2/errors"
	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/controllers"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

func dial(t *testing.T, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// outgoing is a client call context carrying the given metadata pairs.
func outgoing(kv ...string) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	return metadata.AppendToOutgoingContext(ctx, kv...), cancel
}

// The gRPC API authenticates every call but health checks, and answers refusals with the
// gRPC code of their status and the API reason in the details, including the statuses
// gRPC has no code of its own for.
func TestGRPCServerAnswersAsTheAPISays(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	s.serveGRPC(t, &TLSConfigs{})
	conn := dial(t, s.conf.Server.GRPC.Addr, insecure.NewCredentials())
	txs := v1.NewTxServiceClient(conn)
	create := func(signer string) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			_, err := txs.CreateTx(ctx, &v1.CreateTxRequest{Signer: signer, To: signerA.Hex(), GasLimit: 21000})
			return err
		}
	}
	tests := []struct {
		name   string
		md     []string
		call   func(ctx context.Context) error
		code   codes.Code
		reason string
	}{
		{name: "a create", md: []string{"x-api-key", clientKey}, call: create(signerA.Hex()), code: codes.OK},
		{name: "no credentials", call: create(signerA.Hex()), code: codes.Unauthenticated, reason: "UNAUTHENTICATED"},
		{name: "a 422 travels as FailedPrecondition", md: []string{"x-api-key", adminKey}, call: create(signerUnknown.Hex()),
			code: codes.FailedPrecondition, reason: "UNKNOWN_SIGNER"},
		{name: "a 409 with its owner", md: []string{"x-api-key", clientKey}, call: create(signerLeased.Hex()), code: codes.Aborted, reason: "NOT_LEADER"},
		{name: "a health check needs no credentials", call: func(ctx context.Context) error {
			resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
			if err == nil && resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				return fmt.Errorf("health %v", resp.GetStatus())
			}
			return err
		}, code: codes.OK},
		{name: "a client cannot call the peers' batch", md: []string{"x-api-key", adminKey}, call: func(ctx context.Context) error {
			_, err := v1.NewPeerServiceClient(conn).ForwardCreates(ctx, &v1.ForwardCreatesRequest{Creates: []*v1.CreateTxRequest{{Signer: signerA.Hex()}}})
			return err
		}, code: codes.PermissionDenied, reason: "PERMISSION_DENIED"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := outgoing(tt.md...)
			defer cancel()
			err := tt.call(ctx)
			if status.Code(err) != tt.code {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tt.code)
			}
			if tt.reason != "" {
				if se := kerrors.FromError(err); se.Reason != tt.reason {
					t.Fatalf("reason %q, want %q", se.Reason, tt.reason)
				}
			}
		})
	}
}

// A peer's batch runs each create as CreateTx would, answers each on its own in order,
// gives each the time its caller had left, and refuses a batch no node of this
// deployment would send.
func TestPeerBatchRunsEachCreate(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{configure: func(c *conf.Bootstrap) { c.Routing.Mode = conf.RoutingForward }})
	s.queue.hold = "slow"
	s.serveGRPC(t, &TLSConfigs{})
	peer := v1.NewPeerServiceClient(dial(t, s.conf.Server.GRPC.Addr, insecure.NewCredentials()))
	create := func(signer common.Address, requestID string) *v1.CreateTxRequest {
		return &v1.CreateTxRequest{Signer: signer.Hex(), RequestId: requestID, To: signerA.Hex(), GasLimit: 21000}
	}
	tooMany := make([]*v1.CreateTxRequest, maxForwardBatch+1)
	for i := range tooMany {
		tooMany[i] = create(signerA, fmt.Sprint("many-", i))
	}
	tests := []struct {
		name string
		req  *v1.ForwardCreatesRequest
		code codes.Code
		want []string // per create: "created" or the reason
	}{
		{name: "each create answered in order", req: &v1.ForwardCreatesRequest{
			Creates: []*v1.CreateTxRequest{create(signerA, "a"), create(signerUnknown, "b"), create(signerA, "c")}},
			want: []string{"created", "UNKNOWN_SIGNER", "created"}},
		{name: "each create gets its caller's time", req: &v1.ForwardCreatesRequest{
			Creates: []*v1.CreateTxRequest{create(signerA, "slow"), create(signerA, "d")}, TimeoutsMs: []uint32{100, 0}},
			want: []string{"UNAVAILABLE", "created"}},
		{name: "a batch larger than any node sends", req: &v1.ForwardCreatesRequest{Creates: tooMany}, code: codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := outgoing("x-api-key", adminKey, controllers.HopsHeader, "1")
			defer cancel()
			resp, err := peer.ForwardCreates(ctx, tt.req)
			if status.Code(err) != tt.code {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tt.code)
			}
			var got []string
			for _, r := range resp.GetResults() {
				switch result := r.GetResult().(type) {
				case *v1.CreateTxResult_Response:
					got = append(got, map[bool]string{true: "created", false: "existing"}[result.Response.GetCreated()])
				case *v1.CreateTxResult_Error:
					got = append(got, result.Error.GetReason())
				}
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("results %v, want %v", got, tt.want)
			}
		})
	}
	// The creates ran as the forwarded caller, with the hop the peer counted.
	for _, a := range s.queue.allocations() {
		if a.caller != "operator" || a.hops != 1 {
			t.Errorf("a create ran as %q at %d hops, want the operator at 1", a.caller, a.hops)
		}
	}
}

// A stream is authenticated when it opens, sends the caller's completions, and ends when
// the service stops instead of holding the shutdown.
func TestWatchCompletionsStreamOverGRPC(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	for i := int64(1); i <= 3; i++ {
		s.feed.items = append(s.feed.items, services.Completion{ChainID: testChainID, TxID: uuid.New(), Signer: signerA, Nonce: uint64(i),
			Status: domain.StateConfirmed, CompletedAt: time.Now(), Position: services.FeedPosition(i)})
	}
	s.serveGRPC(t, &TLSConfigs{})
	txs := v1.NewTxServiceClient(dial(t, s.conf.Server.GRPC.Addr, insecure.NewCredentials()))
	t.Run("no credentials", func(t *testing.T) {
		ctx, cancel := outgoing()
		defer cancel()
		stream, err := txs.WatchCompletions(ctx, &v1.WatchCompletionsRequest{})
		if err == nil {
			_, err = stream.Recv()
		}
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("stream without credentials: %v, want Unauthenticated", err)
		}
	})
	t.Run("from the cursor on, until the service stops", func(t *testing.T) {
		ctx, cancel := outgoing("x-api-key", clientKey)
		defer cancel()
		stream, err := txs.WatchCompletions(ctx, &v1.WatchCompletionsRequest{After: "1"})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for range 2 {
			c, err := stream.Recv()
			if err != nil {
				t.Fatalf("after %v: %v", got, err)
			}
			got = append(got, c.GetCursor())
		}
		if fmt.Sprint(got) != "[2 3]" {
			t.Fatalf("streamed %v, want [2 3]", got)
		}
		s.streams.Close()
		done := make(chan error, 1)
		go func() {
			_, err := stream.Recv()
			done <- err
		}()
		select {
		case err := <-done:
			// The handler returns when its context ends: a clean end of the stream,
			// from which the client resumes with its cursor.
			if !errors.Is(err, io.EOF) {
				t.Fatalf("stream ended with %v, want its clean end", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the stream did not end when the service closed its streams")
		}
	})
}

// With peer TLS, a hop count is believed only from a connection whose client certificate
// the peer CA issued: a caller over TLS without one, or over another transport, cannot
// pass as a forwarded request.
func TestHopsAreBelievedOnlyFromVerifiedPeers(t *testing.T) {
	t.Parallel()
	pki := newTestPKI(t)
	serverCert, serverKey := pki.issue(t, "server")
	peerCert, peerKey := pki.issue(t, "peer")
	s := newStack(t, stackOptions{configure: func(c *conf.Bootstrap) {
		c.Routing.Mode = conf.RoutingForward
		c.Server.TLS = conf.TLS{CertFile: serverCert, KeyFile: serverKey}
		c.Routing.PeerTLS = conf.PeerTLS{CAFile: pki.caFile, CertFile: peerCert, KeyFile: peerKey}
	}})
	configs, err := NewTLSConfigs(s.conf.Server, s.conf.Routing)
	if err != nil {
		t.Fatal(err)
	}
	s.serveGRPC(t, configs)
	caPEM, err := os.ReadFile(pki.caFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	tests := []struct {
		name  string
		creds credentials.TransportCredentials
		code  codes.Code
	}{
		{"a peer with its certificate", credentials.NewTLS(configs.Peer), codes.OK},
		{"a caller over TLS without a certificate", credentials.NewTLS(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}), codes.PermissionDenied},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			peer := v1.NewPeerServiceClient(dial(t, s.conf.Server.GRPC.Addr, tt.creds))
			ctx, cancel := outgoing("x-api-key", clientKey, controllers.HopsHeader, "1")
			defer cancel()
			_, err := peer.ForwardCreates(ctx, &v1.ForwardCreatesRequest{Creates: []*v1.CreateTxRequest{{Signer: signerA.Hex(), To: signerA.Hex(), GasLimit: 21000}}})
			if status.Code(err) != tt.code {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tt.code)
			}
		})
	}
	// Over HTTP no header makes a forwarded request.
	rec := request{method: "POST", path: "/api/v1/tx", body: createBody(signerA.Hex(), "http"),
		header: map[string]string{"X-API-Key": clientKey, controllers.HopsHeader: "1"}}.send(s.httpServer())
	if rec.Code != http.StatusAccepted {
		t.Fatalf("create over HTTP: %d %s", rec.Code, rec.Body)
	}
	allocations := s.queue.allocations()
	if last := allocations[len(allocations)-1]; last.hops != 0 {
		t.Errorf("an HTTP caller's hop header was believed: %d hops", last.hops)
	}
}

// In basic mode no node forwards, so no request is a forwarded one: a caller's hop header
// is ignored over gRPC as well (it would pass the rate limit, and open ForwardCreates).
// Health checks pass the rate limit.
func TestBasicModeBelievesNoHopsAndProbesAreNotLimited(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{configure: func(c *conf.Bootstrap) {
		c.Server.RateLimit = conf.RateLimit{Enabled: true, RequestsPerSecond: 0.1, Burst: 1}
	}})
	s.serveGRPC(t, &TLSConfigs{})
	conn := dial(t, s.conf.Server.GRPC.Addr, insecure.NewCredentials())
	ctx, cancel := outgoing("x-api-key", clientKey, controllers.HopsHeader, "1")
	defer cancel()
	_, err := v1.NewPeerServiceClient(conn).ForwardCreates(ctx, &v1.ForwardCreatesRequest{Creates: []*v1.CreateTxRequest{{Signer: signerA.Hex(), To: signerA.Hex(), GasLimit: 21000}}})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("ForwardCreates from a caller with a hop header: %v, want PermissionDenied", err)
	}
	limited := 0
	for i := range 3 {
		_, err := v1.NewTxServiceClient(conn).CreateTx(ctx, &v1.CreateTxRequest{Signer: signerA.Hex(), RequestId: fmt.Sprint("basic-", i), To: signerA.Hex(), GasLimit: 21000})
		if status.Code(err) == codes.ResourceExhausted {
			limited++
		}
	}
	if limited == 0 {
		t.Fatal("three creates at 0.1 a second with a hop header: none was limited")
	}
	// Health checks carry no credential and are not counted: probes are never limited.
	for i := range 5 {
		probeCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := healthpb.NewHealthClient(conn).Check(probeCtx, &healthpb.HealthCheckRequest{})
		cancel()
		if err != nil {
			t.Fatalf("health check %d at a limit of 0.1 a second: %v", i+1, err)
		}
	}
}

// rawCodec sends a call's message as the bytes given, so a test can send what no
// protobuf library would encode; answers are read as protobuf.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)      { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error { return proto.Unmarshal(data, v.(proto.Message)) }
func (rawCodec) Name() string                       { return "proto" }

// A message gRPC cannot read is refused as the HTTP API refuses such a body, with a reason,
// never INTERNAL as if the service had failed; a call and a stream alike, and the service
// goes on serving.
func TestGRPCRefusesUnreadableMessagesWithAReason(t *testing.T) {
	t.Parallel()
	s := newStack(t, stackOptions{})
	s.serveGRPC(t, &TLSConfigs{})
	conn := dial(t, s.conf.Server.GRPC.Addr, insecure.NewCredentials())
	signerField := func(value []byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), value)
	}
	wellFormed, err := proto.Marshal(&v1.CreateTxRequest{Signer: signerUnknown.Hex(), To: signerA.Hex(), GasLimit: 21000})
	if err != nil {
		t.Fatal(err)
	}
	overLimit := max(s.conf.Server.MaxBodyBytes, s.conf.Server.MaxBatchBodyBytes) + 1
	create := func(ctx context.Context, msg []byte) error {
		return conn.Invoke(ctx, v1.TxService_CreateTx_FullMethodName, msg, &v1.CreateTxResponse{}, grpc.ForceCodec(rawCodec{}))
	}
	watch := func(ctx context.Context, msg []byte) error {
		stream, err := conn.NewStream(ctx, &v1.TxService_ServiceDesc.Streams[0], v1.TxService_WatchCompletions_FullMethodName, grpc.ForceCodec(rawCodec{}))
		if err != nil {
			return err
		}
		if err := stream.SendMsg(msg); err != nil {
			return err
		}
		if err := stream.CloseSend(); err != nil {
			return err
		}
		return stream.RecvMsg(&v1.Completion{})
	}
	tests := []struct {
		name   string
		call   func(context.Context, []byte) error
		msg    []byte
		code   codes.Code
		reason string
	}{
		{"a string field that is not UTF-8", create, signerField([]byte{0xff, 0xfe}), codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"bytes that are not protobuf", create, []byte{0xff, 0xff, 0xff}, codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"a message over the largest a call may carry, refused by gRPC unread", create, signerField(bytes.Repeat([]byte("a"), int(overLimit))), codes.ResourceExhausted, ""},
		{"a stream's request that is not UTF-8", watch, signerField([]byte{0xc3, 0x28}), codes.InvalidArgument, "INVALID_ARGUMENT"},
		{"a well-formed create still served", create, wellFormed, codes.FailedPrecondition, "UNKNOWN_SIGNER"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := outgoing("x-api-key", adminKey)
			defer cancel()
			err := tt.call(ctx, tt.msg)
			if status.Code(err) != tt.code {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tt.code)
			}
			if se := kerrors.FromError(err); se.Reason != tt.reason {
				t.Fatalf("reason %q (%v), want %q", se.Reason, err, tt.reason)
			}
		})
	}
}
