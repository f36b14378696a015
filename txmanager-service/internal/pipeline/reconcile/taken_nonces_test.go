package reconcile_test

import (
	"context"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/params"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/reconcile"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/test/faultproxy"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// A broadcast answered "nonce too low" while the node knows none of our hashes leaves the
// row NONCE_TAKEN; the stage then finds what holds the nonce on chain. The row's own intent
// under another hash is this service's transaction whose attempt the database lost: it is
// recorded and followed. Another intent, confirmed, took the nonce for good: the row is
// final with its completion. Anything not yet confirmed is looked at again later
// (docs/design.md#reconciliation).
func TestSettleTakenNonces(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// ownIntent: the transaction at the nonce carries the row's intent (a self-transfer
		// of 1 wei) under another hash; otherwise it sends 99 wei elsewhere.
		ownIntent     bool
		confirmations uint64
		// finalizedTag: the chain's finality is the node's finalized block (confirmations 0,
		// as the presets have it); the simulated chain finalizes every 32 blocks.
		finalizedTag bool
		// blocksOnTop are sealed after the block holding the nonce's transaction.
		blocksOnTop int
		wantSettled int
		wantState   domain.State
		wantSub     string
		// wantHash: the row follows the chain's transaction.
		wantHash        bool
		wantCompletions int
	}{
		{name: "the row's own intent under another hash: recognised and followed", ownIntent: true, confirmations: 2,
			wantSettled: 1, wantState: domain.StateTracking, wantSub: string(domain.SubStateRecognised), wantHash: true},
		{name: "another intent, confirmed: the nonce is gone for good", confirmations: 2, blocksOnTop: 1,
			wantSettled: 1, wantState: domain.StateFailedFinal, wantSub: string(domain.SubStateNonceTaken), wantCompletions: 1},
		{name: "another intent, one block short of confirmed: looked at again later", confirmations: 3, blocksOnTop: 1,
			wantState: domain.StateTracking, wantSub: string(domain.SubStateNonceTaken)},
		// A database restored from an older backup: the chain used the nonce long before the
		// window the stage reads first.
		{name: "the row's own intent, mined before the scan window: recognised", ownIntent: true, confirmations: 2, blocksOnTop: 20,
			wantSettled: 1, wantState: domain.StateTracking, wantSub: string(domain.SubStateRecognised), wantHash: true},
		{name: "another intent, mined before the scan window: the nonce is gone for good", confirmations: 2, blocksOnTop: 20,
			wantSettled: 1, wantState: domain.StateFailedFinal, wantSub: string(domain.SubStateNonceTaken), wantCompletions: 1},
		{name: "another intent on a finalized-tag chain, mined but not finalized: looked at again later", finalizedTag: true, blocksOnTop: 1,
			wantState: domain.StateTracking, wantSub: string(domain.SubStateNonceTaken)},
		{name: "another intent on a finalized-tag chain, finalized: the nonce is gone for good", finalizedTag: true, blocksOnTop: 40,
			wantSettled: 1, wantState: domain.StateFailedFinal, wantSub: string(domain.SubStateNonceTaken), wantCompletions: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStage(t)
			r := s.reconciler(reconcile.Config{ScanBlocks: 8, Confirmations: tc.confirmations, UseFinalizedTag: tc.finalizedTag, ResubmitInterval: time.Minute}, services.SystemClock{})
			s.allocate(1)
			to, value := recipient, int64(99)
			if tc.ownIntent {
				to, value = s.signer, 1
			}
			// Its fees differ from the service's own attempt, so the node knows another hash.
			taker := s.sendOutside(0, to, value, 2*params.GWei)
			s.waitPending(1)
			s.mine(1 + tc.blocksOnTop)
			s.submit()
			if row := s.row(0); row.subState != string(domain.SubStateNonceTaken) {
				t.Fatalf("row after the broadcast %+v, want NONCE_TAKEN", row)
			}

			settled, err := r.SettleTakenNonces(ctx(t), s.lease)
			if err != nil || settled != tc.wantSettled {
				t.Fatalf("settled %d, %v; want %d", settled, err, tc.wantSettled)
			}
			row := s.row(0)
			if row.state != string(tc.wantState) || row.subState != tc.wantSub || row.completions != tc.wantCompletions {
				t.Fatalf("row %+v, want %s/%s with %d completions", row, tc.wantState, tc.wantSub, tc.wantCompletions)
			}
			if got := common.HexToHash(row.hash) == taker; got != tc.wantHash {
				t.Fatalf("row follows the chain's transaction %s: %v (row hash %s), want %v", taker.Hex(), got, row.hash, tc.wantHash)
			}
			if tc.wantState == domain.StateFailedFinal && !strings.Contains(row.lastError, taker.Hex()) {
				t.Fatalf("last error %q does not name the transaction that took the nonce", row.lastError)
			}
		})
	}
}

// A node that keeps only its recent blocks' state (a full node, not an archive) cannot say
// at which block the signer's nonce was used. A taken nonce mined long before the window a
// pass reads first is then found by reading the chain's blocks, a window's worth a pass
// going down from the head, and settled as any other; before, its row waited for an archive
// endpoint that may never come, and every later nonce of the signer behind it. The depths
// put the transaction just below the window, on the first and the last block of a step, and
// far down.
func TestATakenNonceMinedLongAgoIsFoundOnANodeWithoutOldState(t *testing.T) {
	t.Parallel()
	const window = 8
	tests := []struct {
		name string
		// depth is how many blocks are sealed on top of the one holding the nonce.
		depth           int
		ownIntent       bool
		wantState       domain.State
		wantSub         string
		wantHash        bool
		wantCompletions int
	}{
		{name: "the row's own intent, far down: recognised and followed", depth: 30, ownIntent: true,
			wantState: domain.StateTracking, wantSub: string(domain.SubStateRecognised), wantHash: true},
		{name: "another intent, far down: the nonce is gone for good", depth: 30,
			wantState: domain.StateFailedFinal, wantSub: string(domain.SubStateNonceTaken), wantCompletions: 1},
		{name: "another intent, just below the window", depth: window,
			wantState: domain.StateFailedFinal, wantSub: string(domain.SubStateNonceTaken), wantCompletions: 1},
		{name: "another intent, on a step's lowest block", depth: 3*window - 1,
			wantState: domain.StateFailedFinal, wantSub: string(domain.SubStateNonceTaken), wantCompletions: 1},
		{name: "another intent, on a step's highest block", depth: 2 * window,
			wantState: domain.StateFailedFinal, wantSub: string(domain.SubStateNonceTaken), wantCompletions: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStageWith(t, testsupport.SignerStageOptions{DevAccounts: 1, ServeHTTP: true})
			proxy, err := faultproxy.Start(s.sim.HTTPEndpoint())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(proxy.Close)
			proxy.SetStateKept(2)
			if err := proxy.SetMode(faultproxy.NoOldState); err != nil {
				t.Fatal(err)
			}
			client, err := rpc.DialHTTP(proxy.URL())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(client.Close)
			r := s.reconcilerOn(chain.NewRPCChain(client), reconcile.Config{ScanBlocks: window, Confirmations: 2, ResubmitInterval: time.Minute}, services.SystemClock{})

			s.allocate(1)
			to, value := recipient, int64(99)
			if tc.ownIntent {
				to, value = s.signer, 1
			}
			taker := s.sendOutside(0, to, value, 2*params.GWei)
			s.waitPending(1)
			s.mine(1 + tc.depth)
			s.submit()
			if row := s.row(0); row.subState != string(domain.SubStateNonceTaken) {
				t.Fatalf("row after the broadcast %+v, want NONCE_TAKEN", row)
			}
			// The first pass reads the window and, going down from the head, its first step
			// (the window again); each later pass one step more.
			head, block := s.headAndBlockOf(taker)
			wantPasses := int((head-block)/window) + 1

			passes := 0
			for settled := 0; settled == 0 && passes < wantPasses+2; {
				passes++
				if settled, err = r.SettleTakenNonces(ctx(t), s.lease); err != nil {
					t.Fatalf("pass %d: %v", passes, err)
				}
			}
			row := s.row(0)
			if row.state != string(tc.wantState) || row.subState != tc.wantSub || row.completions != tc.wantCompletions {
				t.Fatalf("row after %d passes %+v, want %s/%s with %d completions", passes, row, tc.wantState, tc.wantSub, tc.wantCompletions)
			}
			if passes != wantPasses {
				t.Fatalf("settled on pass %d, want %d: steps of %d blocks down from head %d reach block %d", passes, wantPasses, window, head, block)
			}
			if got := common.HexToHash(row.hash) == taker; got != tc.wantHash {
				t.Fatalf("row follows the chain's transaction %s: %v (row hash %s), want %v", taker.Hex(), got, row.hash, tc.wantHash)
			}
			if proxy.OldStateRefused() == 0 {
				t.Fatal("the node was never asked for old state: the test did not reach a node without it")
			}
		})
	}
}

// headAndBlockOf is the chain's head and the block holding hash.
func (s *stage) headAndBlockOf(hash common.Hash) (head, block uint64) {
	s.t.Helper()
	header, err := s.sim.LatestHeader(s.t.Context())
	if err != nil {
		s.t.Fatal(err)
	}
	results, err := s.sim.TransactionReceipts(s.t.Context(), []common.Hash{hash})
	if err != nil || len(results) != 1 || results[0].Receipt == nil {
		s.t.Fatalf("receipt of %s: %v %v", hash.Hex(), results, err)
	}
	return header.Number, results[0].Receipt.BlockNumber
}

// reorgAfterScan is the simulated chain, reorganised by reorg right after it answers the
// first scan for a sender's transactions: that answer names a block the chain no longer
// holds, as an endpoint on another branch, or a reorganisation during the pass, would.
type reorgAfterScan struct {
	*chain.SimulatedChain
	reorg   func()
	reorged bool
}

func (c *reorgAfterScan) SentTransactions(ctx context.Context, from common.Address, nonces []uint64, maxBlocks uint64) (map[uint64]services.SentTx, error) {
	found, err := c.SimulatedChain.SentTransactions(ctx, from, nonces, maxBlocks)
	if !c.reorged {
		c.reorged = true
		c.reorg()
	}
	return found, err
}

// Another intent took the row's nonce in a block that a reorganisation then replaced with one
// holding the row's own intent. The pass that found the other intent, deep enough by count
// but in a block the chain no longer holds, leaves the row as it was; the next pass finds
// the row's own transaction and follows it. Made FAILED_FINAL on the first finding, the
// row would report as failed a transfer the chain carried out.
func TestATakenNonceIsNotSettledOnABlockTheChainNoLongerHolds(t *testing.T) {
	t.Parallel()
	s := newStage(t)
	s.allocate(1)
	foreign := s.sendOutside(0, recipient, 99, 2*params.GWei)
	s.waitPending(1)
	s.mine(2)
	s.submit()
	if row := s.row(0); row.subState != string(domain.SubStateNonceTaken) {
		t.Fatalf("row after the broadcast %+v, want NONCE_TAKEN", row)
	}
	client := s.sim.Backend().Client()
	receipt, err := client.TransactionReceipt(ctx(t), foreign)
	if err != nil {
		t.Fatal(err)
	}
	parent, err := client.HeaderByNumber(ctx(t), new(big.Int).Sub(receipt.BlockNumber, big.NewInt(1)))
	if err != nil {
		t.Fatal(err)
	}
	var own common.Hash
	reorging := &reorgAfterScan{SimulatedChain: s.sim, reorg: func() {
		if err := s.sim.Backend().Fork(parent.Hash()); err != nil {
			t.Error(err)
			return
		}
		// The fork moves the head back at once; the other intent, back in the pool, is
		// dropped, and an empty block sealed (more where the node's head had not moved).
		// Then the row's intent (a self-transfer of 1 wei) under a hash of its own, with
		// fees that would replace the other intent had the pool kept it.
		s.sim.Backend().Rollback()
		oldHead := s.mine(0)
		s.mine(int(oldHead - parent.Number.Uint64() + 1))
		own = s.sendOutsideCapped(0, s.signer, 1, 3*params.GWei, 200*params.GWei)
		s.mine(3)
	}}
	r, err := reconcile.New(reconcile.Config{ScanBlocks: 8, Confirmations: 2, ResubmitInterval: time.Minute}, s.store,
		repositories.NewAttemptRepository(s.pool, chainID), reorging, s.node.Leases, services.SystemClock{}, telemetry.Noop(), s.logger)
	if err != nil {
		t.Fatal(err)
	}

	settled, err := r.SettleTakenNonces(ctx(t), s.lease)
	if err != nil || settled != 0 {
		t.Fatalf("the pass that found the other intent in a replaced block settled %d, %v; want 0", settled, err)
	}
	if row := s.row(0); row.state != string(domain.StateTracking) || row.subState != string(domain.SubStateNonceTaken) || row.completions != 0 {
		t.Fatalf("row after that pass %+v, want TRACKING/NONCE_TAKEN with no completion", row)
	}
	if mined, err := client.TransactionReceipt(ctx(t), own); err != nil || mined.Status != 1 {
		t.Fatalf("the row's own intent on the new branch: %v, %v; want it mined", mined, err)
	}
	if header, err := client.HeaderByNumber(ctx(t), receipt.BlockNumber); err != nil || header.Hash() == receipt.BlockHash {
		t.Fatalf("block %s after the reorganisation: %v, %v; want another block than the one the other intent was in", receipt.BlockNumber, header, err)
	}

	settled, err = r.SettleTakenNonces(ctx(t), s.lease)
	if err != nil || settled != 1 {
		t.Fatalf("the next pass settled %d, %v; want 1", settled, err)
	}
	if row := s.row(0); row.state != string(domain.StateTracking) || row.subState != string(domain.SubStateRecognised) || common.HexToHash(row.hash) != own {
		t.Fatalf("row after the next pass %+v, want TRACKING/RECOGNISED following %s", row, own.Hex())
	}
}
