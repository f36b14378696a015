package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	nethttp "net/http"
	"strings"
	"sync"
	"testing"
	"time"

	kerrors "github.com/go-kratos/kratos/v2/errors"
	"github.com/go-kratos/kratos/v2/transport"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/controllers"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// cluster is two nodes on one database: the owner of signerLeased's lease, serving gRPC
// and registered in the node registry, and a node a caller reached, in forward mode.
type cluster struct {
	owner, entry *stack
}

func newCluster(t *testing.T, configureOwner func(*conf.Bootstrap)) *cluster {
	t.Helper()
	pool := testsupport.MigratedPool(t)
	owner := newStack(t, stackOptions{pool: pool, ownsAll: true, configure: func(c *conf.Bootstrap) {
		c.Routing.Mode = conf.RoutingForward
		if configureOwner != nil {
			configureOwner(c)
		}
	}})
	owner.serveGRPC(t, &TLSConfigs{})
	if err := owner.nodes.Join(t.Context()); err != nil {
		t.Fatal(err)
	}
	entry := newStack(t, stackOptions{pool: pool, nodeID: "node-e", otherOwner: services.LeaseOwner("node-a", "test"), configure: func(c *conf.Bootstrap) {
		c.Routing.Mode = conf.RoutingForward
	}})
	return &cluster{owner: owner, entry: entry}
}

// asCaller is a server context of a call that came with the given headers.
func asCaller(ctx context.Context, header map[string]string) context.Context {
	h := nethttp.Header{}
	for k, v := range header {
		h.Set(k, v)
	}
	return transport.NewServerContext(ctx, fakeTransport{header: h})
}

// In forward mode a create for a signer another node owns is served by the owner, as the
// original caller (whose credentials travel with it), one hop further, in the caller's
// trace; the answer reaches the caller as if served here.
func TestForwardedCreateIsServedByTheOwnerAsTheCaller(t *testing.T) {
	t.Parallel()
	c := newCluster(t, nil)
	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	rec := request{method: "POST", path: "/api/v1/tx", body: createBody(signerLeased.Hex(), "fwd-1"), header: map[string]string{
		"X-API-Key": clientKey, "traceparent": "00-" + traceID + "-00f067aa0ba902b7-01",
	}}.send(c.entry.httpServer())
	if rec.Code != nethttp.StatusAccepted || !strings.Contains(rec.Body.String(), `"requestId":"fwd-1"`) {
		t.Fatalf("create through the entry node: %d %s", rec.Code, rec.Body)
	}
	if got := c.entry.queue.allocations(); len(got) != 0 {
		t.Errorf("the entry node allocated %v itself", got)
	}
	owned := c.owner.queue.allocations()
	if len(owned) != 1 {
		t.Fatalf("the owner allocated %d creates, want the forwarded one", len(owned))
	}
	if a := owned[0]; a.caller != "client" || a.hops != 1 || a.trace.String() != traceID {
		t.Errorf("the owner ran it as %q at %d hops in trace %s, want the client at 1 hop in %s", a.caller, a.hops, a.trace, traceID)
	}
}

// A create as large as the configured body limit allows is answered through the owner even
// when that limit is raised past gRPC's default 4 MiB: the answer repeats the calldata in
// hex, about twice the create, and a node reading its peer's answers at gRPC's default
// size dropped it after the owner had made the create.
func TestAForwardedCreatesLargeAnswerReachesTheCaller(t *testing.T) {
	t.Parallel()
	raiseLimits := func(c *conf.Bootstrap) {
		c.Routing.Mode = conf.RoutingForward
		c.Server.MaxBodyBytes, c.Server.MaxBatchBodyBytes = 8<<20, 8<<20
		// A chain whose blocks take far more gas than Ethereum's 2^24 a transaction.
		c.Create.MaxDataBytes, c.Create.MaxGasLimit = 4<<20, 200_000_000
		// Reading and decoding a 6 MiB body takes seconds under the race detector on a
		// loaded machine: the call's own 5 s ran out before it asked for the lease.
		c.Server.HTTP.Timeout, c.Server.GRPC.Timeout = conf.Duration(time.Minute), conf.Duration(time.Minute)
	}
	pool := testsupport.MigratedPool(t)
	owner := newStack(t, stackOptions{pool: pool, ownsAll: true, configure: raiseLimits})
	owner.serveGRPC(t, &TLSConfigs{})
	if err := owner.nodes.Join(t.Context()); err != nil {
		t.Fatal(err)
	}
	entry := newStack(t, stackOptions{pool: pool, nodeID: "node-e", otherOwner: services.LeaseOwner("node-a", "test"), configure: raiseLimits})
	data := "0x" + strings.Repeat("ab", 3<<20)
	body := fmt.Sprintf(`{"signer":%q,"requestId":"large-1","to":%q,"data":%q,"gasLimit":150000000}`, signerLeased.Hex(), signerA.Hex(), data)
	rec := request{method: "POST", path: "/api/v1/tx", body: body, header: map[string]string{"X-API-Key": clientKey}}.send(entry.httpServer())
	if rec.Code != nethttp.StatusAccepted || !strings.Contains(rec.Body.String(), `"requestId":"large-1"`) {
		t.Fatalf("a 3 MiB create through the entry node: %d %.300s", rec.Code, rec.Body)
	}
	if owned := owner.queue.allocations(); len(owned) != 1 {
		t.Fatalf("the owner allocated %d creates, want the forwarded one", len(owned))
	}
}

// Every way forwarding can fail reaches the routing as an answer it can act on: the
// owner's own refusal as the API error it gave, an owner that is gone or unreachable as
// UNAVAILABLE (which routing retries), and an owner too slow for the caller as UNAVAILABLE
// once the caller's time is up.
func TestForwardCreateFailures(t *testing.T) {
	t.Parallel()
	c := newCluster(t, nil)
	c.owner.queue.hold = "slow"
	nodes := repositories.NewNodeRepository(c.owner.pool)
	// node-c is registered alive at an address where nothing listens.
	deadAddr := testsupport.RefusingAddr(t)
	if err := nodes.Heartbeat(t.Context(), services.NodeInfo{ID: "node-c", Incarnation: "c1", GRPCAddr: deadAddr, StartedAt: time.Now().UTC()}, time.Minute); err != nil {
		t.Fatal(err)
	}
	owner := services.LeaseOwner("node-a", "test")
	tests := []struct {
		name  string
		owner string
		// key is the caller's credential (the client's when empty).
		key     string
		req     *v1.CreateTxRequest
		timeout time.Duration
		// status and reason of the API error, or unavailable: a routing-retryable
		// UnavailableError saying why ("*": UNAVAILABLE in either form).
		status      int
		reason      string
		unavailable string
	}{
		{name: "served", owner: owner, req: &v1.CreateTxRequest{Signer: signerLeased.Hex(), To: signerA.Hex(), GasLimit: 21000}},
		{name: "the owner's refusal", owner: owner, key: adminKey, req: &v1.CreateTxRequest{Signer: signerUnknown.Hex(), To: signerA.Hex(), GasLimit: 21000},
			status: nethttp.StatusUnprocessableEntity, reason: "UNKNOWN_SIGNER"},
		{name: "the owner authorises the original caller", owner: owner, req: &v1.CreateTxRequest{Signer: signerUnknown.Hex(), To: signerA.Hex(), GasLimit: 21000},
			status: nethttp.StatusForbidden, reason: "PERMISSION_DENIED"},
		{name: "an owner not in the registry", owner: "node-z#z1", req: &v1.CreateTxRequest{Signer: signerLeased.Hex()}, unavailable: "is not alive"},
		{name: "the owner's node id served by another process", owner: "node-a#before-restart", req: &v1.CreateTxRequest{Signer: signerLeased.Hex()},
			unavailable: "is not alive"},
		{name: "an owner that cannot be reached", owner: "node-c#c1", req: &v1.CreateTxRequest{Signer: signerLeased.Hex(), To: signerA.Hex(), GasLimit: 21000},
			unavailable: "lease owner unreachable"},
		{name: "an owner too slow for the caller", owner: owner, timeout: 300 * time.Millisecond,
			// The owner's own deadline (the caller's time, passed on), the call's and the
			// wait's end together: whichever answers first, it is UNAVAILABLE, which
			// routing retries.
			req: &v1.CreateTxRequest{Signer: signerLeased.Hex(), RequestId: "slow", To: signerA.Hex(), GasLimit: 21000}, unavailable: "*"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if tt.timeout > 0 {
				cancel()
				ctx, cancel = context.WithTimeout(context.Background(), tt.timeout)
			}
			defer cancel()
			key := tt.key
			if key == "" {
				key = clientKey
			}
			ctx = asCaller(ctx, withKey(key))
			resp, err := c.entry.forwarder.ForwardCreate(ctx, tt.owner, tt.req)
			var unavailable *domain.UnavailableError
			switch {
			case tt.unavailable == "*":
				if !errors.As(err, &unavailable) && kerrors.FromError(err).Reason != "UNAVAILABLE" {
					t.Fatalf("error %v, want UNAVAILABLE", err)
				}
			case tt.unavailable != "":
				if !errors.As(err, &unavailable) || !strings.Contains(err.Error(), tt.unavailable) {
					t.Fatalf("error %v, want UNAVAILABLE saying %q", err, tt.unavailable)
				}
			case tt.status != 0:
				se := kerrors.FromError(err)
				if int(se.Code) != tt.status || se.Reason != tt.reason {
					t.Fatalf("error %v, want %d %s", err, tt.status, tt.reason)
				}
			case err != nil || !resp.GetCreated():
				t.Fatalf("forwarded create: %v %v", resp, err)
			}
		})
	}
}

// A resolution forwarded to the owner runs there with the operator's credentials.
func TestForwardResolveRunsOnTheOwner(t *testing.T) {
	t.Parallel()
	c := newCluster(t, nil)
	created, err := c.owner.tx.CreateTx(domain.WithPrincipal(context.Background(), domain.Principal{ID: "x", AllSigners: true}),
		&v1.CreateTxRequest{Signer: signerA.Hex(), To: signerA.Hex(), GasLimit: 21000})
	if err != nil {
		t.Fatal(err)
	}
	owner := services.LeaseOwner("node-a", "test")
	tests := []struct {
		name   string
		key    string
		owner  string
		reason string // "" when resolved
	}{
		{"the operator", adminKey, owner, ""},
		{"a client", clientKey, owner, "PERMISSION_DENIED"},
		{"a missing owner", adminKey, "node-z#z", "UNAVAILABLE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			resp, err := c.entry.forwarder.ForwardResolve(asCaller(ctx, withKey(tt.key)), tt.owner,
				&v1.ResolveTxRequest{TxId: created.GetTx().GetTxId(), Action: "cancel", Reason: "operator"})
			if tt.reason != "" {
				var unavailable *domain.UnavailableError
				if got := kerrors.FromError(err).Reason; got != tt.reason && !(tt.reason == "UNAVAILABLE" && errors.As(err, &unavailable)) {
					t.Fatalf("error %v, want %s", err, tt.reason)
				}
				return
			}
			if err != nil || resp.GetAction() != "CANCEL" || resp.GetTx().GetTxId() != created.GetTx().GetTxId() {
				t.Fatalf("resolved %v %v, want CANCEL of %s", resp, err, created.GetTx().GetTxId())
			}
		})
	}
}

// scriptedPeer is an owner whose batch answers are scripted: a malformed or short answer
// must still answer every waiting create.
type scriptedPeer struct {
	v1.UnimplementedPeerServiceServer
	v1.UnimplementedTxServiceServer
	answer func(req *v1.ForwardCreatesRequest) (*v1.ForwardCreatesResponse, error)
	mu     sync.Mutex
	single int
}

func (p *scriptedPeer) ForwardCreates(_ context.Context, req *v1.ForwardCreatesRequest) (*v1.ForwardCreatesResponse, error) {
	return p.answer(req)
}

func (p *scriptedPeer) CreateTx(_ context.Context, req *v1.CreateTxRequest) (*v1.CreateTxResponse, error) {
	p.mu.Lock()
	p.single++
	p.mu.Unlock()
	return &v1.CreateTxResponse{Created: true, Tx: &v1.Tx{RequestId: req.GetRequestId()}}, nil
}

// Whatever the owner answers a batch, each create gets an answer of its own: a result in
// order, UNAVAILABLE for a short or empty answer, and, when the owner takes smaller
// messages than the batch, each create in a call of its own.
func TestBatchAnswersEveryCreate(t *testing.T) {
	t.Parallel()
	created := func(id string) *v1.CreateTxResult {
		return &v1.CreateTxResult{Result: &v1.CreateTxResult_Response{Response: &v1.CreateTxResponse{Created: true, Tx: &v1.Tx{RequestId: id}}}}
	}
	tests := []struct {
		name   string
		answer func(req *v1.ForwardCreatesRequest) (*v1.ForwardCreatesResponse, error)
		// maxRecv bounds the owner's messages (0: gRPC's default).
		maxRecv int
		data    string
		want    []string // per create: its request id when served, else the error's text
		single  int
	}{
		{name: "answered in order", answer: func(req *v1.ForwardCreatesRequest) (*v1.ForwardCreatesResponse, error) {
			return &v1.ForwardCreatesResponse{Results: []*v1.CreateTxResult{created("a"), v1.CreateResultOf(nil, v1.ErrorSignerRetired("retired"))}}, nil
		}, want: []string{"a", "SIGNER_RETIRED"}},
		{name: "a short answer", answer: func(*v1.ForwardCreatesRequest) (*v1.ForwardCreatesResponse, error) {
			return &v1.ForwardCreatesResponse{Results: []*v1.CreateTxResult{created("a")}}, nil
		}, want: []string{"answered 1 of 2", "answered 1 of 2"}},
		{name: "an empty result", answer: func(*v1.ForwardCreatesRequest) (*v1.ForwardCreatesResponse, error) {
			return &v1.ForwardCreatesResponse{Results: []*v1.CreateTxResult{created("a"), {}}}, nil
		}, want: []string{"a", "with nothing"}},
		{name: "an owner that takes smaller messages", maxRecv: 3 << 10, data: "0x" + strings.Repeat("ab", 1200),
			answer: func(*v1.ForwardCreatesRequest) (*v1.ForwardCreatesResponse, error) {
				return nil, errors.New("unreachable")
			},
			want: []string{"a", "b"}, single: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var opts []grpc.ServerOption
			if tt.maxRecv > 0 {
				opts = append(opts, grpc.MaxRecvMsgSize(tt.maxRecv))
			}
			srv := grpc.NewServer(opts...)
			peer := &scriptedPeer{answer: tt.answer}
			v1.RegisterPeerServiceServer(srv, peer)
			v1.RegisterTxServiceServer(srv, peer)
			go func() { _ = srv.Serve(lis) }()
			defer srv.Stop()
			conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			b := newCreateBatcher(conn, metadata.Pairs(controllers.HopsHeader, "1"), propagation.TraceContext{})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var items []*forwardItem
			for _, id := range []string{"a", "b"} {
				items = append(items, &forwardItem{ctx: ctx, req: &v1.CreateTxRequest{RequestId: id, Data: tt.data}, done: make(chan forwardResult, 1)})
			}
			// One call for both, as when they queued behind calls in flight.
			b.send(items)
			var got []string
			for _, it := range items {
				r := <-it.done
				switch {
				case r.err == nil:
					got = append(got, r.resp.GetTx().GetRequestId())
				case kerrors.FromError(r.err).Reason != "":
					got = append(got, kerrors.FromError(r.err).Reason)
				default:
					got = append(got, r.err.Error())
				}
			}
			for i, want := range tt.want {
				if i >= len(got) || !strings.Contains(got[i], want) {
					t.Fatalf("answers %v, want %v", got, tt.want)
				}
			}
			if peer.single != tt.single {
				t.Errorf("%d creates sent one by one, want %d", peer.single, tt.single)
			}
		})
	}
}

// Creates share a call only with creates of the same caller at the same hop count, and a
// queue unused past the idle limit is dropped, as is a caller that gave up before its
// create was sent.
func TestBatchQueuesPerCallerAndIdle(t *testing.T) {
	t.Parallel()
	keys := map[string]string{
		"client at one hop":       batchKey(metadata.Pairs(controllers.HopsHeader, "1", "x-api-key", "k1")),
		"same, headers reordered": batchKey(metadata.Pairs("x-api-key", "k1", controllers.HopsHeader, "1")),
		"another caller":          batchKey(metadata.Pairs(controllers.HopsHeader, "1", "x-api-key", "k2")),
		"another hop count":       batchKey(metadata.Pairs(controllers.HopsHeader, "2", "x-api-key", "k1")),
	}
	if keys["client at one hop"] != keys["same, headers reordered"] {
		t.Error("the same caller's creates got two queues")
	}
	for _, other := range []string{"another caller", "another hop count"} {
		if keys[other] == keys["client at one hop"] {
			t.Errorf("%s shares the client's queue", other)
		}
	}

	conn, err := grpc.NewClient("127.0.0.1:1", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	idle, busy := newCreateBatcher(conn, nil, propagation.TraceContext{}), newCreateBatcher(conn, nil, propagation.TraceContext{})
	idle.lastUsed = now.Add(-2 * time.Minute)
	busy.lastUsed, busy.inflight = now.Add(-2*time.Minute), 1
	f := &Forwarder{conns: map[string]*peerConn{"127.0.0.1:1": {conn: conn, lastUsed: now, batchers: map[string]*createBatcher{"idle": idle, "busy": busy}}}, idleLimit: time.Minute}
	f.trim(now)
	if got := fmt.Sprint(len(f.conns["127.0.0.1:1"].batchers), f.conns["127.0.0.1:1"].batchers["busy"] != nil); got != "1 true" {
		t.Errorf("after trimming: %s queues left (busy kept: ...), want only the busy one", got)
	}
	f.close()

	// A caller that gave up is never sent (the batch has no one else, so no call is made).
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	item := &forwardItem{ctx: gone, req: &v1.CreateTxRequest{}, done: make(chan forwardResult, 1)}
	busy.send([]*forwardItem{item})
	select {
	case r := <-item.done:
		t.Errorf("a create whose caller left was sent: %v", r)
	default:
	}
}
