package server

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	kerrors "github.com/go-kratos/kratos/v2/errors"
	"github.com/go-kratos/kratos/v2/transport"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
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
	// creds is mutual TLS with the peer CA (routing.peerTLS), or plaintext without it.
	creds credentials.TransportCredentials
	// propagator continues the caller's trace on the owner.
	propagator propagation.TextMapPropagator

	mu        sync.Mutex
	conns     map[string]*peerConn
	lastTrim  time.Time
	idleLimit time.Duration
}

// peerConn is one connection to a peer, kept for reuse while it is used, with the batches
// of creates forwarded over it (one queue per hop count and caller credentials). Guarded
// by Forwarder.mu.
type peerConn struct {
	conn     *grpc.ClientConn
	lastUsed time.Time
	batchers map[string]*createBatcher
}

// peerIdleLimit: a connection to a peer not used for this long is closed (the peer may be
// gone for good: a replaced pod's address).
const peerIdleLimit = 5 * time.Minute

// NewForwarder builds the forwarder; the cleanup closes its connections.
func NewForwarder(nodes *services.NodeRegistry, tlsConfigs *TLSConfigs) (*Forwarder, func()) {
	creds := insecure.NewCredentials()
	if tlsConfigs.Peer != nil {
		creds = credentials.NewTLS(tlsConfigs.Peer)
	}
	f := &Forwarder{nodes: nodes, creds: creds, conns: map[string]*peerConn{}, propagator: telemetry.Propagator(), idleLimit: peerIdleLimit}
	return f, f.close
}

// ForwardCreate implements controllers.OwnerForwarder. The create joins the owner's next
// batch (createBatcher): under load one call carries many creates, and alone it goes at once.
func (f *Forwarder) ForwardCreate(ctx context.Context, owner string, req *v1.CreateTxRequest) (*v1.CreateTxResponse, error) {
	md := f.callerMetadata(ctx)
	batcher, err := f.batcherTo(ctx, owner, md)
	if err != nil {
		return nil, err
	}
	return batcher.forward(ctx, req)
}

// batcherTo is the batch queue for creates to owner that carry md.
func (f *Forwarder) batcherTo(ctx context.Context, owner string, md metadata.MD) (*createBatcher, error) {
	pc, err := f.peerTo(ctx, owner)
	if err != nil {
		return nil, err
	}
	key := batchKey(md)
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := pc.batchers[key]
	if !ok {
		b = newCreateBatcher(pc.conn, md, f.propagator)
		pc.batchers[key] = b
	}
	return b, nil
}

// ForwardResolve implements controllers.OwnerForwarder.
func (f *Forwarder) ForwardResolve(ctx context.Context, owner string, req *v1.ResolveTxRequest) (*v1.ResolveTxResponse, error) {
	pc, err := f.peerTo(ctx, owner)
	if err != nil {
		return nil, err
	}
	resp, err := v1.NewAdminServiceClient(pc.conn).ResolveTx(f.outgoing(ctx), req)
	return resp, fromPeer(err)
}

// peerMaxAnswerBytes is the largest answer a node reads from another. A create's answer
// repeats its calldata in hex, so it is about twice the create: with server.maxBodyBytes
// raised past 2 MiB, gRPC's own 4 MiB limit would drop the answer to a create the owner has
// made, and the caller would only ever hear UNAVAILABLE or OUTCOME_UNKNOWN for it.
const peerMaxAnswerBytes = 64 << 20

// peerTo returns the connection to owner if the registry says that very process (node id
// and incarnation) is alive: a node id now served by a restarted process is not the owner.
func (f *Forwarder) peerTo(ctx context.Context, owner string) (*peerConn, error) {
	nodeID, incarnation := services.SplitLeaseOwner(owner)
	node, alive, err := f.nodes.Lookup(ctx, nodeID)
	if err == nil && (!alive || (incarnation != "" && services.Incarnation(node.Incarnation) != incarnation)) {
		// The copy may predate the owner's restart or its last heartbeat: ask the registry.
		node, alive, err = f.nodes.LookupFresh(ctx, nodeID)
	}
	if err != nil {
		return nil, &domain.UnavailableError{Reason: "node registry", Err: err}
	}
	if !alive || (incarnation != "" && services.Incarnation(node.Incarnation) != incarnation) {
		return nil, &domain.UnavailableError{Reason: fmt.Sprintf("lease owner %s is not alive", owner)}
	}
	now := time.Now()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.trim(now)
	if pc, ok := f.conns[node.GRPCAddr]; ok {
		pc.lastUsed = now
		return pc, nil
	}
	conn, err := grpc.NewClient(node.GRPCAddr, grpc.WithTransportCredentials(f.creds),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(peerMaxAnswerBytes)))
	if err != nil {
		return nil, &domain.UnavailableError{Reason: "connect to lease owner", Err: err}
	}
	pc := &peerConn{conn: conn, lastUsed: now, batchers: map[string]*createBatcher{}}
	f.conns[node.GRPCAddr] = pc
	return pc, nil
}

// trim closes connections to peers idle past the limit, and drops batch queues idle past
// it (a caller whose tokens rotate leaves one behind per token), at most once a minute.
// Holds f.mu.
func (f *Forwarder) trim(now time.Time) {
	if now.Sub(f.lastTrim) < time.Minute {
		return
	}
	f.lastTrim = now
	for addr, pc := range f.conns {
		if now.Sub(pc.lastUsed) > f.idleLimit {
			_ = pc.conn.Close()
			delete(f.conns, addr)
			continue
		}
		for key, b := range pc.batchers {
			if b.idleSince(now) > f.idleLimit {
				delete(pc.batchers, key)
			}
		}
	}
}

// outgoing carries the hop count, the caller's credentials and its trace to the owner.
func (f *Forwarder) outgoing(ctx context.Context) context.Context {
	return outgoingWith(ctx, ctx, f.callerMetadata(ctx), f.propagator)
}

// outgoingWith is ctx sending md and the trace of traceOf to a peer; md itself is left as it
// is (a batch queue keeps it for every call).
func outgoingWith(ctx, traceOf context.Context, md metadata.MD, propagator propagation.TextMapPropagator) context.Context {
	md = md.Copy()
	propagator.Inject(traceOf, metadataCarrier(md))
	return metadata.NewOutgoingContext(ctx, md)
}

// callerMetadata is what a forwarded request carries of its caller: the hop count and the
// caller's credentials.
func (f *Forwarder) callerMetadata(ctx context.Context) metadata.MD {
	md := metadata.Pairs(controllers.HopsHeader, strconv.Itoa(controllers.Hops(ctx)+1))
	header := func(string) string { return "" }
	if tr, ok := transport.FromServerContext(ctx); ok {
		header = tr.RequestHeader().Get
	}
	for _, h := range forwardedHeaders() {
		v, recorded := controllers.CallerHeader(ctx, h)
		if !recorded {
			v = header(h)
		}
		if v != "" {
			md.Set(h, v)
		}
	}
	return md
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
// failures become UNAVAILABLE, and those after which the request may have reached the
// peer also domain.ErrSentUnanswered.
func fromPeer(err error) error {
	if err == nil {
		return nil
	}
	se := kerrors.FromError(err)
	if se.Reason == "" {
		if neverSent(err) {
			return &domain.UnavailableError{Reason: "lease owner unreachable", Err: err}
		}
		return &domain.UnavailableError{Reason: "lease owner did not answer", Err: fmt.Errorf("%w: %w", domain.ErrSentUnanswered, err)}
	}
	if st, ok := status.FromError(err); ok {
		for httpCode, grpcCode := range grpcCodeOf {
			if st.Code() == grpcCode {
				se.Code = int32(httpCode)
			}
		}
	}
	return se
}

// neverSent: the call failed before a connection to the peer existed, so the peer cannot
// have received it: gRPC's own answer when it could not connect, or could not complete the
// TLS handshake ("connection error: ..."), unlike a connection lost with the call on it.
func neverSent(err error) bool {
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.Unavailable {
		return false
	}
	msg := st.Message()
	return strings.HasPrefix(msg, "connection error:") || strings.Contains(msg, "while dialing") || strings.Contains(msg, "connection refused")
}

func (f *Forwarder) close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for addr, pc := range f.conns {
		_ = pc.conn.Close()
		delete(f.conns, addr)
	}
}
