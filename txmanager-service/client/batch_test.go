package txmclient_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	txmclient "github.com/bionicotaku/txmanager-service/client"
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
