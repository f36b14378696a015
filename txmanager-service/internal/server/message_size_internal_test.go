package server

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
)

// A call's message over maxBodyBytes is refused, except the batches of creates: a client's,
// and the creates a node forwards to a signer's owner, which it packs up to
// forwardBatchBytes whatever maxBodyBytes is (each create was held to the limits where it
// came in).
func TestMessageSizeInterceptorLetsBatchesOfCreatesThrough(t *testing.T) {
	const maxBytes = 64 << 10
	big := &v1.CreateTxRequest{Signer: "0x" + strings.Repeat("a", 40), Data: "0x" + strings.Repeat("ab", 20<<10)}
	forwarded := &v1.ForwardCreatesRequest{Creates: []*v1.CreateTxRequest{big, big, big, big}}
	tests := []struct {
		name        string
		method      string
		req         any
		wantRefused bool
	}{
		{"one create over the limit", v1.TxService_CreateTx_FullMethodName, &v1.CreateTxRequest{Data: "0x" + strings.Repeat("ab", 40<<10)}, true},
		{"one create under it", v1.TxService_CreateTx_FullMethodName, big, false},
		{"a client's batch", v1.TxService_CreateTxBatch_FullMethodName, &v1.CreateTxBatchRequest{Creates: forwarded.Creates}, false},
		{"creates forwarded to the owner", v1.PeerService_ForwardCreates_FullMethodName, forwarded, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			served := false
			_, err := messageSizeInterceptor(maxBytes)(context.Background(), tc.req, &grpc.UnaryServerInfo{FullMethod: tc.method},
				func(context.Context, any) (any, error) { served = true; return nil, nil })
			if refused := err != nil && v1.IsRequestTooLarge(err); refused != tc.wantRefused || served == tc.wantRefused {
				t.Fatalf("err %v, served %v; want refused %v", err, served, tc.wantRefused)
			}
		})
	}
}
