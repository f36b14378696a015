package chain_test

import (
	"context"
	"testing"

	"github.com/bionicotaku/txmanager-service/internal/chain"
)

// go-ethereum's own batch limit (--rpc.batch-request-limit, here 4) refuses a larger
// batch: the adapter sends the same calls again at once in smaller batches, every call is
// answered, and the endpoint keeps the size it took.
func TestBatchRefusedAsTooLargeIsSentInSmallerBatches(t *testing.T) {
	t.Parallel()
	sim := newSimulated(t, chain.SimulatedConfig{DevAccounts: 1, HTTPAddr: "127.0.0.1:0", BatchRequestLimit: 4})
	c, err := chain.DialRPC(context.Background(), sim.HTTPEndpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	for range 3 {
		sim.Commit()
	}
	numbers := make([]uint64, 30)
	for i := range numbers {
		numbers[i] = uint64(i)
	}
	headers, err := c.HeadersByNumber(context.Background(), numbers)
	if err != nil {
		t.Fatalf("headers in batches the node refuses: %v", err)
	}
	for i, h := range headers {
		if (h != nil) != (i <= 3) {
			t.Fatalf("header %d: %+v, want one for blocks 0..3 only", i, h)
		}
	}
	if got := c.BatchSize(); got > 4 || got < 1 {
		t.Fatalf("batch size after the refusal %d, want 1..4", got)
	}
	before := c.RequestCount()
	if _, err := c.HeadersByNumber(context.Background(), numbers[:8]); err != nil {
		t.Fatal(err)
	}
	if sent, want := c.RequestCount()-before, int64((8+c.BatchSize()-1)/c.BatchSize()); sent != want {
		t.Fatalf("8 calls took %d requests, want %d: the learnt size was not kept", sent, want)
	}
	t.Logf("30 header look-ups answered through a node refusing batches over 4; the endpoint's batch size is now %d", c.BatchSize())
}
