package txmclient_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	txmclient "github.com/bionicotaku/txmanager-service/client"
)

// openTxService answers every read at once with a transaction still in flight, as a
// service with long-polls turned off (feed.maxWait 0) does.
type openTxService struct {
	v1.UnimplementedTxServiceServer
	reads atomic.Int64
}

func (s *openTxService) GetTx(_ context.Context, r *v1.GetTxRequest) (*v1.Tx, error) {
	s.reads.Add(1)
	return &v1.Tx{TxId: r.GetTxId(), State: "SUBMITTED"}, nil
}

// Wait against a service that answers before the long-poll is out waits between reads,
// growing, instead of asking as fast as it is answered.
func TestWaitBacksOffWhenAnsweredEarly(t *testing.T) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer()
	fake := &openTxService{}
	v1.RegisterTxServiceServer(server, fake)
	go func() { _ = server.Serve(listener) }()
	defer server.Stop()
	client, closeClient, err := txmclient.New(context.Background(), txmclient.Config{Endpoints: []string{listener.Addr().String()}, Backoff: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer closeClient()
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if _, err := client.Wait(ctx, "00000000-0000-7000-8000-000000000001"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait: %v, want the context's deadline", err)
	}
	// 100 + 200 + 400 + 800 ms of waits fit in 1.5 s: at most 5 reads.
	if reads := fake.reads.Load(); reads < 2 || reads > 5 {
		t.Fatalf("%d reads in 1.5 s, want 2 to 5", reads)
	}
}
