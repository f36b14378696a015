package txmclient_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	txmclient "github.com/bionicotaku/txmanager-service/client"
	"github.com/bionicotaku/txmanager-service/client/internal/servicetest"
)

// CreateMany splits a list longer than a batch into calls, answers each create in the order
// given (one refused alone), replays them all when sent again; WaitMany waits for all.
func TestCreateManyAndWaitMany(t *testing.T) {
	client, closeClient := connect(apiKey)
	defer closeClient()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	n := txmclient.MaxBatch + 200
	reqs := make([]*v1.CreateTxRequest, n)
	for i := range reqs {
		reqs[i] = &v1.CreateTxRequest{Signer: signer, To: recipient, Value: fmt.Sprint(i + 1), GasLimit: 21000, RequestId: fmt.Sprintf("%s-%d", t.Name(), i)}
	}
	reqs[500].To = "0xnot-an-address"
	results, err := client.CreateMany(ctx, reqs)
	if err != nil || len(results) != n {
		t.Fatalf("CreateMany of %d: %d results, %v", n, len(results), err)
	}
	var ids []string
	for i, r := range results {
		switch {
		case i == 500:
			if !v1.IsInvalidArgument(r.Err) {
				t.Fatalf("the bad create: %v, want INVALID_ARGUMENT", r.Err)
			}
			if again, _ := txmclient.Retryable(r.Err); again {
				t.Fatal("a bad create is retryable")
			}
		case r.Err != nil || !r.Response.GetCreated() || r.Response.GetTx().GetRequestId() != reqs[i].GetRequestId():
			t.Fatalf("create %d: %v %v", i, r.Response, r.Err)
		default:
			ids = append(ids, r.Response.GetTx().GetTxId())
		}
	}
	again, err := client.CreateMany(ctx, reqs[:10])
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range again {
		if r.Err != nil || r.Response.GetCreated() || r.Response.GetTx().GetTxId() != ids[i] {
			t.Fatalf("replay %d: %v %v", i, r.Response, r.Err)
		}
	}
	if _, err := client.CreateMany(ctx, []*v1.CreateTxRequest{{Signer: signer}}); err == nil {
		t.Fatal("CreateMany without request ids was sent")
	}
	txs, err := client.WaitMany(ctx, ids[:50], 16)
	if err != nil {
		t.Fatal(err)
	}
	for i, tx := range txs {
		if tx.GetState() != "CONFIRMED" || tx.GetTxId() != ids[i] {
			t.Fatalf("WaitMany %d: %s %s", i, tx.GetTxId(), tx.GetState())
		}
	}
}

// Each create's answer repeats its transaction, calldata included, so the answer to a
// batch near the request's size limit is larger than gRPC's default 4 MiB: CreateMany reads
// it (every create made is reported made), and splits creates too large for one call.
func TestCreateManyWithCalldata(t *testing.T) {
	client, closeClient := connect(apiKey)
	defer closeClient()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tests := []struct {
		name     string
		count    int
		hexChars int
	}{
		{"one call whose answer is over 4 MiB", txmclient.MaxBatch, 4020},
		{"creates over a call's size, split", 1500, 6000},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reqs := make([]*v1.CreateTxRequest, tc.count)
			for i := range reqs {
				reqs[i] = &v1.CreateTxRequest{Signer: servicetest.BulkSigner, To: recipient, Value: "0", GasLimit: 150_000,
					Data: "0x" + strings.Repeat("ab", tc.hexChars/2), RequestId: fmt.Sprintf("%s-%d", t.Name(), i)}
			}
			t.Logf("the creates come to %d bytes", proto.Size(&v1.CreateTxBatchRequest{Creates: reqs}))
			results, err := client.CreateMany(ctx, reqs)
			if err != nil || len(results) != len(reqs) {
				t.Fatalf("CreateMany: %d results, %v", len(results), err)
			}
			answer := 0
			for i, r := range results {
				if r.Err != nil || !r.Response.GetCreated() || r.Response.GetTx().GetRequestId() != reqs[i].GetRequestId() {
					t.Fatalf("create %d: %v, %v", i, r.Response.GetTx().GetTxId(), r.Err)
				}
				answer += proto.Size(r.Response)
			}
			t.Logf("their answers to %d bytes", answer)
			if answer < 4<<20 {
				t.Fatalf("the answers came to %d bytes: under gRPC's default limit, this case tests nothing", answer)
			}
		})
	}
}

// A create repeating an earlier one of the list (same signer and request id) is refused
// wherever the two fall among CreateMany's calls, as the service refuses such a repeat
// within one batch: it is not reported made a second time.
func TestCreateManyRefusesARepeatAcrossCalls(t *testing.T) {
	client, closeClient := connect(apiKey)
	defer closeClient()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	reqs := make([]*v1.CreateTxRequest, txmclient.MaxBatch+1)
	for i := range reqs {
		reqs[i] = &v1.CreateTxRequest{Signer: servicetest.BulkSigner, To: recipient, Value: fmt.Sprint(i + 1), GasLimit: 21000, RequestId: fmt.Sprintf("%s-%d", t.Name(), i)}
	}
	repeat := proto.Clone(reqs[0]).(*v1.CreateTxRequest)
	repeat.Signer = strings.ToUpper(repeat.Signer[:2]) + repeat.Signer[2:] // the same signer, spelt otherwise
	reqs[txmclient.MaxBatch] = repeat
	results, err := client.CreateMany(ctx, reqs)
	if err != nil || len(results) != len(reqs) {
		t.Fatalf("CreateMany: %d results, %v", len(results), err)
	}
	for i, r := range results[:txmclient.MaxBatch] {
		if r.Err != nil || !r.Response.GetCreated() {
			t.Fatalf("create %d: %v", i, r.Err)
		}
	}
	last := results[txmclient.MaxBatch]
	if !v1.IsInvalidArgument(last.Err) || !strings.Contains(last.Err.Error(), "repeats creates[0]") {
		t.Fatalf("the repeat in the second call: %v, %v; want INVALID_ARGUMENT naming creates[0]", last.Response, last.Err)
	}
}
