package server

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	kerrors "github.com/go-kratos/kratos/v2/errors"
	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// A forwarded create's refusal reaches the caller as the API error the owner gave: status,
// reason, message and metadata.
func TestForwardedErrorsKeepTheAPIError(t *testing.T) {
	tests := []*kerrors.Error{
		kerrors.New(http.StatusConflict, v1.ErrorReason_NOT_LEADER.String(), "signer is leased by node-b").WithMetadata(map[string]string{"owner": "node-b", "retryAfterMs": "500"}),
		kerrors.New(http.StatusUnprocessableEntity, v1.ErrorReason_INSUFFICIENT_FUNDS.String(), "signer cannot pay"),
		kerrors.New(http.StatusServiceUnavailable, v1.ErrorReason_UNAVAILABLE.String(), "no chain endpoint answers"),
	}
	for _, want := range tests {
		t.Run(want.Reason, func(t *testing.T) {
			got := kerrors.FromError(v1.CreateResultOf(nil, want).GetError().AsError())
			if got.Code != want.Code || got.Reason != want.Reason || got.Message != want.Message || len(got.Metadata) != len(want.Metadata) {
				t.Fatalf("round trip gave %d %s %q %v, want %d %s %q %v", got.Code, got.Reason, got.Message, got.Metadata, want.Code, want.Reason, want.Message, want.Metadata)
			}
			for k, v := range want.Metadata {
				if got.Metadata[k] != v {
					t.Fatalf("metadata %s = %q, want %q", k, got.Metadata[k], v)
				}
			}
		})
	}
}

// olderPeer is a node of an earlier version: it serves CreateTx and knows no PeerService.
type olderPeer struct {
	v1.UnimplementedTxServiceServer
	mu    sync.Mutex
	calls int
}

func (p *olderPeer) CreateTx(_ context.Context, req *v1.CreateTxRequest) (*v1.CreateTxResponse, error) {
	p.mu.Lock()
	p.calls++
	p.mu.Unlock()
	if req.GetValue() == "refuse" {
		return nil, kerrors.New(http.StatusBadRequest, v1.ErrorReason_INVALID_ARGUMENT.String(), "value: not a number")
	}
	return &v1.CreateTxResponse{Created: true, Tx: &v1.Tx{TxId: "tx-" + req.GetRequestId()}}, nil
}

// During a rolling upgrade the owner may not know ForwardCreates yet: the creates then go
// one call each, and every caller still gets its own answer.
func TestForwardingFallsBackToOneCallEachForAnOlderOwner(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	older := &olderPeer{}
	v1.RegisterTxServiceServer(srv, older)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	b := newCreateBatcher(conn, metadata.Pairs("x-txm-hops", "1"), propagation.TraceContext{})
	requests := []*v1.CreateTxRequest{{RequestId: "a", Value: "1"}, {RequestId: "b", Value: "refuse"}, {RequestId: "c", Value: "3"}}
	items := make([]*forwardItem, len(requests))
	for i, req := range requests {
		items[i] = &forwardItem{ctx: context.Background(), req: req, done: make(chan forwardResult, 1)}
		b.add(items[i])
	}
	for i, it := range items {
		r := <-it.done
		switch requests[i].GetValue() {
		case "refuse":
			if se := kerrors.FromError(r.err); se.Reason != v1.ErrorReason_INVALID_ARGUMENT.String() || se.Code != http.StatusBadRequest {
				t.Fatalf("create %s: %v, want the owner's INVALID_ARGUMENT", requests[i].GetRequestId(), r.err)
			}
		default:
			if r.err != nil || r.resp.GetTx().GetTxId() != "tx-"+requests[i].GetRequestId() {
				t.Fatalf("create %s: %v %v, want its own transaction", requests[i].GetRequestId(), r.resp, r.err)
			}
		}
	}
	if b.unbatchedUntil.Load() <= time.Now().UnixNano() {
		t.Fatal("the batcher did not note that the owner cannot take batches")
	}
	if older.calls != len(requests) {
		t.Fatalf("the older owner served %d CreateTx calls, want one per create (%d)", older.calls, len(requests))
	}
}

func TestBatchLength(t *testing.T) {
	item := func(dataBytes int) *forwardItem {
		return &forwardItem{req: &v1.CreateTxRequest{Signer: "0x00000000000000000000000000000000000000aa", Data: "0x" + strings.Repeat("ab", dataBytes)}}
	}
	many := func(n, dataBytes int) []*forwardItem {
		out := make([]*forwardItem, n)
		for i := range out {
			out[i] = item(dataBytes)
		}
		return out
	}
	tests := []struct {
		name   string
		queued []*forwardItem
		want   int
	}{
		{"nothing queued", nil, 0},
		{"small creates up to the count limit", many(300, 10), forwardBatchLimit},
		{"large creates up to the size budget", many(10, 40<<10), 2}, // 80 KiB of hex each
		{"a create larger than the budget goes alone", many(3, 150<<10), 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := batchLength(tt.queued); got != tt.want {
				t.Fatalf("batchLength = %d, want %d", got, tt.want)
			}
		})
	}
}

// crashingOwner takes forwarded creates and never answers: the test stops its server with
// the calls in flight, as an owner that crashed after taking them.
type crashingOwner struct {
	v1.UnimplementedPeerServiceServer
	received chan struct{}
}

func (o *crashingOwner) ForwardCreates(ctx context.Context, _ *v1.ForwardCreatesRequest) (*v1.ForwardCreatesResponse, error) {
	o.received <- struct{}{}
	<-ctx.Done()
	return nil, ctx.Err()
}

// A forwarded create that reached the owner and got no answer is told apart from one that
// never left this node: only the first may have been made there (domain.ErrSentUnanswered).
func TestForwardFailuresSayWhetherTheOwnerGotTheCreate(t *testing.T) {
	send := func(t *testing.T, addr string) error {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		b := newCreateBatcher(conn, metadata.Pairs("x-txm-hops", "1"), propagation.TraceContext{})
		it := &forwardItem{ctx: context.Background(), req: &v1.CreateTxRequest{Value: "1"}, done: make(chan forwardResult, 1)}
		b.add(it)
		return (<-it.done).err
	}
	t.Run("the owner took it and stopped", func(t *testing.T) {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer()
		owner := &crashingOwner{received: make(chan struct{}, 1)}
		v1.RegisterPeerServiceServer(srv, owner)
		go func() { _ = srv.Serve(lis) }()
		go func() {
			<-owner.received
			srv.Stop()
		}()
		if err := send(t, lis.Addr().String()); !errors.Is(err, domain.ErrSentUnanswered) || !errors.Is(err, domain.ErrUnavailable) {
			t.Fatalf("%v: want UNAVAILABLE, sent and unanswered", err)
		}
	})
	t.Run("nothing listens at the owner's address", func(t *testing.T) {
		// Port 1 on the loopback: reserved, nothing listens there.
		if err := send(t, "127.0.0.1:1"); errors.Is(err, domain.ErrSentUnanswered) || !errors.Is(err, domain.ErrUnavailable) {
			t.Fatalf("%v: want UNAVAILABLE, never sent", err)
		}
	})
}

// A caller whose deadline passes while its create is with the owner is told the create was
// sent and not answered (the owner may still make it), not a plain UNAVAILABLE that invites
// a retry; one whose deadline passed before anything was sent is told UNAVAILABLE alone.
func TestAForwardThatOutlivesItsCallerSaysWhetherItWasSent(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	owner := &crashingOwner{received: make(chan struct{}, 16)}
	v1.RegisterPeerServiceServer(srv, owner)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	b := newCreateBatcher(conn, metadata.Pairs("x-txm-hops", "1"), propagation.TraceContext{})
	tests := []struct {
		name     string
		ctx      func() (context.Context, context.CancelFunc)
		wantSent bool
	}{
		{"the owner holds it past the caller's deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 300*time.Millisecond)
		}, true},
		{"the caller had given up before it was sent", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx, cancel
		}, false},
	}
	for _, tc := range tests {
		ctx, cancel := tc.ctx()
		_, err := b.forward(ctx, &v1.CreateTxRequest{Value: "1"})
		cancel()
		if !errors.Is(err, domain.ErrUnavailable) || errors.Is(err, domain.ErrSentUnanswered) != tc.wantSent {
			t.Errorf("%s: %v; want UNAVAILABLE, sent and unanswered: %v", tc.name, err, tc.wantSent)
		}
	}
}
