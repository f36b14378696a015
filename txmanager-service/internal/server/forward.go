package server

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"

	kerrors "github.com/go-kratos/kratos/v2/errors"
	"github.com/go-kratos/kratos/v2/transport"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/controllers"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// forwardedHeaders travel with a forwarded request: the caller's credentials, so the owner
// authorises the original caller, not the forwarding node.
func forwardedHeaders() []string { return []string{"authorization", "x-api-key"} }

// Forwarder sends requests to the node that holds a signer's lease, over internal gRPC.
type Forwarder struct {
	nodes *services.NodeRegistry
	// propagator continues the caller's trace on the owner.
	propagator propagation.TextMapPropagator

	mu    sync.Mutex
	conns map[string]*grpc.ClientConn
}

// NewForwarder builds the forwarder; the cleanup closes its connections.
func NewForwarder(nodes *services.NodeRegistry) (*Forwarder, func()) {
	f := &Forwarder{nodes: nodes, conns: map[string]*grpc.ClientConn{}, propagator: telemetry.Propagator()}
	return f, f.close
}

// ForwardCreate implements controllers.OwnerForwarder.
func (f *Forwarder) ForwardCreate(ctx context.Context, owner string, req *v1.CreateTxRequest) (*v1.CreateTxResponse, error) {
	conn, err := f.connTo(ctx, owner)
	if err != nil {
		return nil, err
	}
	resp, err := v1.NewTxServiceClient(conn).CreateTx(f.outgoing(ctx), req)
	return resp, fromPeer(err)
}

// ForwardResolve implements controllers.OwnerForwarder.
func (f *Forwarder) ForwardResolve(ctx context.Context, owner string, req *v1.ResolveTxRequest) (*v1.ResolveTxResponse, error) {
	conn, err := f.connTo(ctx, owner)
	if err != nil {
		return nil, err
	}
	resp, err := v1.NewAdminServiceClient(conn).ResolveTx(f.outgoing(ctx), req)
	return resp, fromPeer(err)
}

// connTo returns a connection to owner if the registry says it is alive.
func (f *Forwarder) connTo(ctx context.Context, owner string) (*grpc.ClientConn, error) {
	node, alive, err := f.nodes.Lookup(ctx, owner)
	if err != nil {
		return nil, &domain.UnavailableError{Reason: "node registry", Err: err}
	}
	if !alive {
		return nil, &domain.UnavailableError{Reason: fmt.Sprintf("lease owner %s is not alive", owner)}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if conn, ok := f.conns[node.GRPCAddr]; ok {
		return conn, nil
	}
	conn, err := grpc.NewClient(node.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, &domain.UnavailableError{Reason: "connect to lease owner", Err: err}
	}
	f.conns[node.GRPCAddr] = conn
	return conn, nil
}

// outgoing carries the hop count and the caller's credentials to the owner.
func (f *Forwarder) outgoing(ctx context.Context) context.Context {
	md := metadata.Pairs(controllers.HopsHeader, strconv.Itoa(controllers.Hops(ctx)+1))
	if tr, ok := transport.FromServerContext(ctx); ok {
		for _, h := range forwardedHeaders() {
			if v := tr.RequestHeader().Get(h); v != "" {
				md.Set(h, v)
			}
		}
	}
	f.propagator.Inject(ctx, metadataCarrier(md))
	return metadata.NewOutgoingContext(ctx, md)
}

// metadataCarrier lets the OTel propagator write gRPC metadata.
type metadataCarrier metadata.MD

func (c metadataCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}
func (c metadataCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }
func (c metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}

// fromPeer turns a peer's gRPC error back into the API error it carried; transport
// failures become UNAVAILABLE.
func fromPeer(err error) error {
	if err == nil {
		return nil
	}
	se := kerrors.FromError(err)
	if se.Reason == "" {
		return &domain.UnavailableError{Reason: "lease owner unreachable", Err: err}
	}
	if st, ok := status.FromError(err); ok && st.Code() == unprocessableGRPCCode {
		se.Code = http.StatusUnprocessableEntity
	}
	return se
}

func (f *Forwarder) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for addr, conn := range f.conns {
		_ = conn.Close()
		delete(f.conns, addr)
	}
}
