package chain_test

import (
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/txmanager-service/internal/chain"
)

// TestReorgIsVisibleThroughTheAdapter replaces the block holding a transaction and checks
// that headers and receipts read through services.Chain follow the new canonical chain.
// This is the technique the finality manager's tests rely on.
func TestReorgIsVisibleThroughTheAdapter(t *testing.T) {
	tests := []struct {
		name string
		// dropTx clears the pool after the fork; otherwise the reorged-out transaction is
		// re-injected into the pool and mined again on the new branch.
		dropTx       bool
		wantReceipt  bool
		wantNonceAtH uint64
	}{
		{name: "transaction dropped by the reorg", dropTx: true, wantReceipt: false, wantNonceAtH: 0},
		{name: "transaction re-mined on the new branch", dropTx: false, wantReceipt: true, wantNonceAtH: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sim := newSimulated(t, chain.SimulatedConfig{DevAccounts: 1})
			ctx := testContext(t)
			key, from := sim.DevKeys()[0], sim.DevAddresses()[0]

			parent, err := sim.LatestHeader(ctx)
			if err != nil {
				t.Fatal(err)
			}
			tx, raw := transfer(t, sim, key, 0)
			sendRaw(t, ctx, sim, raw)
			blockA := sim.Commit()
			height := parent.Number + 1
			if got := mustReceipt(t, ctx, sim, tx.Hash()); got.BlockHash != blockA || got.BlockNumber != height {
				t.Fatalf("before reorg: receipt in %s at %d, want %s at %d", got.BlockHash, got.BlockNumber, blockA, height)
			}

			// Fork rewinds the head to parent at once; the new branch wins as soon as a
			// block is sealed on it.
			if err := sim.Backend().Fork(parent.Hash); err != nil {
				t.Fatalf("Fork: %v", err)
			}
			if tc.dropTx {
				sim.Backend().Rollback()
			}
			sim.Commit()
			sim.Commit()

			headers, err := sim.HeadersByNumber(ctx, []uint64{parent.Number, height, height + 1})
			if err != nil {
				t.Fatal(err)
			}
			if headers[0].Hash != parent.Hash {
				t.Errorf("fork point changed: %s, want %s", headers[0].Hash, parent.Hash)
			}
			if headers[1] == nil || headers[1].Hash == blockA {
				t.Fatalf("canonical block at height %d is still %s after the reorg", height, blockA)
			}
			if headers[2] == nil || headers[2].ParentHash != headers[1].Hash {
				t.Errorf("height %d does not build on the new block at %d: %+v", height+1, height, headers[2])
			}

			waitForTxIndex(t, ctx, sim)
			results, err := sim.TransactionReceipts(ctx, []common.Hash{tx.Hash()})
			if err != nil || results[0].Err != nil {
				t.Fatalf("TransactionReceipts: %v / %v", err, results[0].Err)
			}
			receipt := results[0].Receipt
			if tc.wantReceipt {
				if receipt == nil || receipt.BlockHash != headers[1].Hash {
					t.Errorf("receipt after reorg = %+v, want it in new block %s", receipt, headers[1].Hash)
				}
			} else if receipt != nil {
				t.Errorf("receipt after reorg = %+v, want none", receipt)
			}
			nonce, err := sim.NonceAt(ctx, from)
			if err != nil || nonce != tc.wantNonceAtH {
				t.Errorf("NonceAt after reorg = %d, %v; want %d", nonce, err, tc.wantNonceAtH)
			}
		})
	}
}
