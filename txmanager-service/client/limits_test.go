package txmclient_test

import (
	"context"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	txmclient "github.com/bionicotaku/txmanager-service/client"
)

// creatingNode makes every create it is sent and counts the creates it made.
type creatingNode struct {
	v1.UnimplementedTxServiceServer
	mu   sync.Mutex
	made map[string]int
}

func (n *creatingNode) CreateTxBatch(_ context.Context, r *v1.CreateTxBatchRequest) (*v1.CreateTxBatchResponse, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := &v1.CreateTxBatchResponse{}
	for _, create := range r.GetCreates() {
		n.made[create.GetRequestId()]++
		out.Results = append(out.Results, v1.CreateResultOf(&v1.CreateTxResponse{Created: true,
			Tx: &v1.Tx{TxId: create.GetRequestId(), Signer: create.GetSigner(), State: "ALLOCATED"}}, nil))
	}
	return out, nil
}

// A service may hold batches to less than the client's first split (server.maxBatchBodyBytes
// below 4 MiB, which sets its gRPC message limit): CreateMany sends the calls it refuses as
// too large again in halves until they pass, and a create too large alone is refused alone.
// Before, the whole list failed with the first refusal.
func TestCreateManyMeetsAServiceLimitBelowItsSplit(t *testing.T) {
	const limit = 1 << 20
	tests := []struct {
		name      string
		count     int
		dataBytes int
		// huge is the index of a create over the limit alone (-1: none).
		huge int
	}{
		{"creates of 2.4 MB in all", 300, 8000, -1},
		{"one create over the limit among small ones", 5, 100, 2},
		{"the first create over the limit", 3, 100, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			listener, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			server := grpc.NewServer(grpc.MaxRecvMsgSize(limit))
			node := &creatingNode{made: map[string]int{}}
			v1.RegisterTxServiceServer(server, node)
			go func() { _ = server.Serve(listener) }()
			t.Cleanup(server.Stop)
			client := newClient(t, txmclient.Config{Endpoints: []string{listener.Addr().String()}, Backoff: 10 * time.Millisecond})

			reqs := make([]*v1.CreateTxRequest, tt.count)
			for i := range reqs {
				size := tt.dataBytes
				if i == tt.huge {
					size = limit + 1
				}
				reqs[i] = &v1.CreateTxRequest{Signer: signer, RequestId: "bulk-" + strconv.Itoa(i), Data: "0x" + strings.Repeat("ab", size/2)}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			results, err := client.CreateMany(ctx, reqs)
			if err != nil || len(results) != len(reqs) {
				t.Fatalf("CreateMany: %d results, %v; want %d", len(results), err, len(reqs))
			}
			for i, r := range results {
				id := reqs[i].GetRequestId()
				if i == tt.huge {
					if status.Code(r.Err) != codes.ResourceExhausted || node.made[id] != 0 {
						t.Errorf("creates[%d], over the limit alone: %v, made %d times; want refused as too large", i, r.Err, node.made[id])
					}
					continue
				}
				if r.Err != nil || !r.Response.GetCreated() || node.made[id] != 1 {
					t.Errorf("creates[%d]: %v, made %d times; want created once", i, r.Err, node.made[id])
				}
			}
		})
	}
}
