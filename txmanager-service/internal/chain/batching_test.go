package chain_test

import (
	"fmt"
	"math/big"
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/txmanager-service/internal/chain"
)

func unknownHashes(n int) []common.Hash {
	hashes := make([]common.Hash, n)
	for i := range hashes {
		hashes[i] = common.BigToHash(big.NewInt(int64(i) + 1))
	}
	return hashes
}

func TestReceiptLookupsAreBatched(t *testing.T) {
	sim := newSimulated(t, chain.SimulatedConfig{DevAccounts: 1})
	ctx := testContext(t)
	sim.Commit()
	waitForTxIndex(t, ctx, sim)

	tests := []struct {
		batchSize    int // 0: default
		lookups      int
		wantRequests int64
	}{
		{batchSize: 0, lookups: 250, wantRequests: 3},
		{batchSize: 0, lookups: 1000, wantRequests: 10},
		{batchSize: 0, lookups: 100, wantRequests: 1},
		{batchSize: 50, lookups: 250, wantRequests: 5},
		{batchSize: 0, lookups: 0, wantRequests: 0},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%d lookups batch %d", tc.lookups, tc.batchSize), func(t *testing.T) {
			adapter := chain.NewRPCChain(sim.RPCClient(), chain.WithMaxBatchSize(tc.batchSize))
			results, err := adapter.TransactionReceipts(ctx, unknownHashes(tc.lookups))
			if err != nil {
				t.Fatalf("TransactionReceipts: %v", err)
			}
			if len(results) != tc.lookups {
				t.Fatalf("got %d results, want %d", len(results), tc.lookups)
			}
			for i, r := range results {
				if r.Receipt != nil || r.Err != nil {
					t.Fatalf("result %d for an unknown hash = %+v, want empty", i, r)
				}
			}
			if got := adapter.RequestCount(); got != tc.wantRequests {
				t.Errorf("%d lookups cost %d requests, want %d", tc.lookups, got, tc.wantRequests)
			}
		})
	}
}

func TestHeaderLookupsAreBatched(t *testing.T) {
	sim := newSimulated(t, chain.SimulatedConfig{DevAccounts: 1})
	ctx := testContext(t)
	sim.Commit()

	heights := make([]uint64, 150)
	for i := range heights {
		heights[i] = uint64(i)
	}
	before := sim.RequestCount()
	headers, err := sim.HeadersByNumber(ctx, heights)
	if err != nil {
		t.Fatal(err)
	}
	if got := sim.RequestCount() - before; got != 2 {
		t.Errorf("150 header lookups cost %d requests, want 2", got)
	}
	if headers[1] == nil || headers[2] != nil {
		t.Errorf("want a header at height 1 and none at 2, got %+v and %+v", headers[1], headers[2])
	}
}

// BenchmarkTransactionReceipts reports the round trips a 1,000-receipt poll costs, the
// number that matters against a remote node.
func BenchmarkTransactionReceipts(b *testing.B) {
	sim, err := chain.NewSimulated(chain.SimulatedConfig{DevAccounts: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer sim.Close()
	ctx := b.Context()
	hashes := unknownHashes(1000)
	// Unknown hashes cost the same round trips whether the node answers null or
	// "indexing in progress", so there is no need to wait for the index here.

	before := sim.RequestCount()
	for b.Loop() {
		if _, err := sim.TransactionReceipts(ctx, hashes); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(sim.RequestCount()-before)/float64(b.N), "requests/1000receipts")
}
