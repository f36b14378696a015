package receipts_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/receipts"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// Finality judges a found receipt, on record or held, against the chain: enough blocks on
// top (or the node's finalized block past it) make the transaction final with its
// completion; a receipt whose block was replaced sends it back to be looked up again
// (docs/design.md#receipts-and-finality).
func TestAdvanceFinality(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  receipts.Config
		// cancelled: a cancellation took the nonce's place in the pool before it was mined.
		cancelled bool
		// blocksOnTop are sealed after the receipt was found; replaced: its block is replaced
		// first.
		blocksOnTop int
		replaced    bool
		wantHeld    bool
		// wantReverted is what finality reports as gone back to tracking.
		wantReverted    int
		wantState       domain.State
		wantSubState    string
		wantCompletions int
	}{
		{name: "on record, enough blocks on top: CONFIRMED with its completion", cfg: receipts.Config{Confirmations: 5}, blocksOnTop: 4,
			wantState: domain.StateConfirmed, wantCompletions: 1},
		{name: "on record, one block short: left for a later pass", cfg: receipts.Config{Confirmations: 5}, blocksOnTop: 3,
			wantState: domain.StateTracking, wantSubState: "MINED"},
		{name: "held, final at the next block: written with its final state", cfg: receipts.Config{Confirmations: 2}, blocksOnTop: 1, wantHeld: true,
			wantState: domain.StateConfirmed, wantCompletions: 1},
		{name: "held, not final yet: still held", cfg: receipts.Config{Confirmations: 3}, blocksOnTop: 1, wantHeld: true,
			wantState: domain.StateTracking, wantSubState: "SIGNED"},
		{name: "a cancellation mined: FAILED_FINAL, cancelled", cfg: receipts.Config{Confirmations: 2}, cancelled: true, blocksOnTop: 1, wantHeld: true,
			wantState: domain.StateFailedFinal, wantSubState: string(domain.SubStateCancelled), wantCompletions: 1},
		{name: "the node's finalized block not past it: not final", cfg: receipts.Config{UseFinalizedTag: true}, blocksOnTop: 10,
			wantState: domain.StateTracking, wantSubState: "MINED"},
		// The embedded chain finalizes every 32nd block.
		{name: "the node's finalized block past it: final", cfg: receipts.Config{UseFinalizedTag: true}, blocksOnTop: 31,
			wantState: domain.StateConfirmed, wantCompletions: 1},
		{name: "on record, its block replaced: tracking again", cfg: receipts.Config{Confirmations: 5}, replaced: true, wantReverted: 1,
			wantState: domain.StateTracking, wantSubState: "REORGED"},
		{name: "held, its block replaced: forgotten and looked up again", cfg: receipts.Config{Confirmations: 2}, replaced: true, wantHeld: true, wantReverted: 1,
			wantState: domain.StateTracking, wantSubState: "SIGNED"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStage(t)
			s.send(1, nil)
			if tc.cancelled {
				s.resign(0, pipeline.AttemptCancel)
			}
			block := s.mine(1)
			tracker := s.tracker(tc.cfg)
			s.record(tracker, block)
			if tracker.HoldsReceipts() != tc.wantHeld {
				t.Fatalf("holds receipts: %v, want %v", tracker.HoldsReceipts(), tc.wantHeld)
			}
			if tc.replaced {
				s.replaceBlock(block)
			}
			s.mine(tc.blocksOnTop)

			reverted, err := tracker.AdvanceFinality(ctx(t), s.signers())
			if err != nil || reverted != tc.wantReverted {
				t.Fatalf("AdvanceFinality = %d, %v; want %d reverted", reverted, err, tc.wantReverted)
			}
			row := s.row(0)
			if row.state != string(tc.wantState) || row.subState != tc.wantSubState || row.completions != tc.wantCompletions {
				t.Fatalf("row %+v, want %s/%s with %d completions", row, tc.wantState, tc.wantSubState, tc.wantCompletions)
			}
			final := tc.wantState != domain.StateTracking
			if final && (row.block != block || row.receiptHash != row.hash) {
				t.Fatalf("final row %+v, want its receipt in block %d on record", row, block)
			}
			if final && tracker.HoldsReceipts() {
				t.Fatal("a receipt written with its final state is still held")
			}
			awaiting, err := tracker.AwaitingReceipt(ctx(t), s.signers())
			if wantAwaiting := map[bool]int{true: 1}[tc.replaced]; err != nil || len(awaiting) != wantAwaiting {
				t.Fatalf("awaiting %d, %v; want %d: only a transaction whose block was replaced is looked up again", len(awaiting), err, wantAwaiting)
			}
		})
	}
}

// behindABalancer is one endpoint over two backends that disagree, as a load balancer or a
// failover between endpoints gives them: while stale is set, the head comes from the live
// node and the headers by number from a backend that stopped at an earlier block and still
// holds what it saw then (nil above it).
type behindABalancer struct {
	services.ReceiptSource
	stale map[uint64]services.BlockHeader
}

func (b *behindABalancer) HeadersByNumber(ctx context.Context, numbers []uint64) ([]*services.BlockHeader, error) {
	if b.stale == nil {
		return b.ReceiptSource.HeadersByNumber(ctx, numbers)
	}
	out := make([]*services.BlockHeader, len(numbers))
	for i, n := range numbers {
		if h, ok := b.stale[n]; ok {
			out[i] = &h
		}
	}
	return out, nil
}

// A receipt's block replaced on the live node but still held by a backend that has not
// moved past it is not final: the depth counts only along headers one backend served
// linked to each other, never a mined height subtracted from a head read elsewhere.
func TestFinalityCountsDepthOnOneChainOnly(t *testing.T) {
	t.Parallel()
	for _, held := range []bool{false, true} {
		t.Run(map[bool]string{false: "on record", true: "held"}[held], func(t *testing.T) {
			t.Parallel()
			s := newStage(t)
			s.send(1, nil)
			block := s.mine(1)
			cfg := receipts.Config{Confirmations: 2}
			if !held {
				cfg.Confirmations = 5 // far enough from finality that the receipt is written
			}
			balancer := &behindABalancer{ReceiptSource: s.chain}
			tracker := receipts.New(cfg, s.store, balancer, s.node.Leases, telemetry.Noop(), s.logger)
			s.record(tracker, block)
			if tracker.HoldsReceipts() != held {
				t.Fatalf("holds receipts: %v, want %v", tracker.HoldsReceipts(), held)
			}
			// The lagging backend's view: the chain up to the receipt's block, as it was.
			seen, err := s.chain.HeadersByNumber(ctx(t), []uint64{block - 1, block})
			if err != nil {
				t.Fatal(err)
			}
			stale := map[uint64]services.BlockHeader{block - 1: *seen[0], block: *seen[1]}
			s.replaceBlock(block)
			s.mine(int(cfg.Confirmations))

			balancer.stale = stale
			if reverted, err := tracker.AdvanceFinality(ctx(t), s.signers()); err != nil || reverted != 0 {
				t.Fatalf("AdvanceFinality behind the balancer = %d, %v; want nothing reverted (the stale backend holds the block)", reverted, err)
			}
			if row := s.row(0); row.state != string(domain.StateTracking) || row.completions != 0 {
				t.Fatalf("row %+v: finalized in a block the live node replaced", row)
			}
			// Both answers from the live node: the replaced block is a reorg.
			balancer.stale = nil
			if reverted, err := tracker.AdvanceFinality(ctx(t), s.signers()); err != nil || reverted != 1 {
				t.Fatalf("AdvanceFinality on the live node = %d, %v; want 1 reverted", reverted, err)
			}
			if row := s.row(0); row.state != string(domain.StateTracking) || row.completions != 0 {
				t.Fatalf("row %+v after a pass on the live node, want tracking", row)
			}
		})
	}
}

// withoutFinalizedTag is an endpoint that does not serve the finalized tag (or fails on it
// for a while).
type withoutFinalizedTag struct{ services.ReceiptSource }

func (withoutFinalizedTag) FinalizedHeader(context.Context) (*services.BlockHeader, error) {
	return nil, fmt.Errorf("%w: the finalized tag", services.ErrNotSupported)
}

// With the finalized tag deciding and the node not serving it, nothing is judged final, but
// a receipt whose block was replaced is still followed back to tracking: before, the whole
// pass failed on the tag, and a dropped transaction stayed mined for ever.
func TestAReorgIsFollowedWhileTheFinalizedTagIsNotServed(t *testing.T) {
	t.Parallel()
	s := newStage(t)
	s.send(1, nil)
	block := s.mine(1)
	tracker := receipts.New(receipts.Config{UseFinalizedTag: true}, s.store, withoutFinalizedTag{s.chain}, s.node.Leases, telemetry.Noop(), s.logger)
	s.record(tracker, block)
	s.replaceBlock(block)
	s.mine(2)
	reverted, err := tracker.AdvanceFinality(ctx(t), s.signers())
	if reverted != 1 || !errors.Is(err, services.ErrNotSupported) {
		t.Fatalf("AdvanceFinality = %d, %v; want the reorg followed (1) and the tag's failure reported", reverted, err)
	}
	if row := s.row(0); row.state != string(domain.StateTracking) || row.subState != "REORGED" || row.completions != 0 {
		t.Fatalf("row %+v, want tracking again after its block was replaced", row)
	}
}

// A chain that got shorter than a receipt's block (a dev node restarted from older state, a
// rollback) and stays so: the receipt is taken as gone with that block once it has been
// above the head for LostAboveHeadAfter, and its transaction is looked up and sent again.
// Before, it stayed mined for a block the chain no longer had, was never sent again, and
// held up the signer's later nonces for good.
func TestAReceiptAboveAShorterChainsHeadIsForgotten(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		cfg          receipts.Config
		wantHeld     bool
		wantSubState string
	}{
		{"on record", receipts.Config{Confirmations: 5, LostAboveHeadAfter: 300 * time.Millisecond}, false, "REORGED"},
		{"held", receipts.Config{Confirmations: 2, LostAboveHeadAfter: 300 * time.Millisecond}, true, "SIGNED"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStage(t)
			s.send(1, nil)
			block := s.mine(1)
			tracker := s.tracker(tc.cfg)
			s.record(tracker, block)
			if tracker.HoldsReceipts() != tc.wantHeld {
				t.Fatalf("holds receipts: %v, want %v", tracker.HoldsReceipts(), tc.wantHeld)
			}
			s.rollBackTo(block)
			if head := s.mine(0); head >= block {
				t.Fatalf("head %d after the rollback, want below %d", head, block)
			}

			if reverted, err := tracker.AdvanceFinality(ctx(t), s.signers()); err != nil || reverted != 0 {
				t.Fatalf("first pass: %d reverted, %v; want none yet (an endpoint behind another is not a reorg)", reverted, err)
			}
			time.Sleep(tc.cfg.LostAboveHeadAfter)
			reverted, err := tracker.AdvanceFinality(ctx(t), s.signers())
			if err != nil || reverted != 1 {
				t.Fatalf("after %s above the head: %d reverted, %v; want 1", tc.cfg.LostAboveHeadAfter, reverted, err)
			}
			if row := s.row(0); row.state != string(domain.StateTracking) || row.subState != tc.wantSubState || row.block != 0 || tracker.HoldsReceipts() {
				t.Fatalf("row %+v (held %v), want TRACKING/%s without a receipt", row, tracker.HoldsReceipts(), tc.wantSubState)
			}
			awaiting, err := tracker.AwaitingReceipt(ctx(t), s.signers())
			if err != nil || len(awaiting) != 1 {
				t.Fatalf("awaiting %d, %v; want the transaction looked up again", len(awaiting), err)
			}
		})
	}
}

// countedHeaders counts the headers an endpoint is asked for, and fails the call numbered
// failCall (0: none).
type countedHeaders struct {
	services.ReceiptSource
	mu       sync.Mutex
	heights  int
	calls    int
	failCall int
}

func (c *countedHeaders) HeadersByNumber(ctx context.Context, numbers []uint64) ([]*services.BlockHeader, error) {
	c.mu.Lock()
	c.calls++
	fail := c.calls == c.failCall
	c.heights += len(numbers)
	c.mu.Unlock()
	if fail {
		return nil, errors.New("429 Too Many Requests")
	}
	return c.ReceiptSource.HeadersByNumber(ctx, numbers)
}

func (c *countedHeaders) take() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.heights
	c.heights = 0
	return n
}

// A receipt far below the finalized block (rows restored from an old backup) is proven over
// several passes, each reading a bounded number of headers, and a failed call only holds
// that receipt back for a pass. Before, every pass read every header from its block up to
// the finalized one, and one failed call failed the pass for every signer of the chain.
func TestAReceiptFarBelowTheFinalizedBlockIsProvenOverPasses(t *testing.T) {
	t.Parallel()
	const beyond, perPass = 16, 40
	tests := []struct {
		name string
		// failCall is the call for headers that fails (0: none).
		failCall int
	}{
		{"every call answered", 0},
		{"a call of the catch-up fails", 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStage(t)
			s.send(1, nil)
			block := s.mine(1)
			endpoint := &countedHeaders{ReceiptSource: s.chain, failCall: tc.failCall}
			tracker := receipts.New(receipts.Config{UseFinalizedTag: true, CatchUpBeyond: beyond, CatchUpPerPass: perPass},
				s.store, endpoint, s.node.Leases, telemetry.Noop(), s.logger)
			s.record(tracker, block)
			s.mine(400)
			finalized, err := s.chain.FinalizedHeader(ctx(t))
			if err != nil || finalized.Number < block+10*perPass/2 {
				t.Fatalf("finalized block %v, %v: want one far above block %d", finalized, err, block)
			}
			minPasses := int((finalized.Number-beyond-block)/perPass) + 1
			passes, failed := 0, 0
			for s.row(0).state == string(domain.StateTracking) && passes < minPasses+5 {
				passes++
				endpoint.take()
				if _, err := tracker.AdvanceFinality(ctx(t), s.signers()); err != nil {
					failed++
				}
				if read := endpoint.take(); read > perPass+beyond+1 {
					t.Fatalf("pass %d read %d headers, want at most %d", passes, read, perPass+beyond+1)
				}
			}
			row := s.row(0)
			if row.state != string(domain.StateConfirmed) || row.completions != 1 {
				t.Fatalf("after %d passes: row %+v, want CONFIRMED with its completion", passes, row)
			}
			wantFailed := map[bool]int{true: 1}[tc.failCall > 0]
			if passes < minPasses || failed != wantFailed {
				t.Fatalf("final after %d passes (%d failed); want at least %d, %d failed", passes, failed, minPasses, wantFailed)
			}
			t.Logf("block %d, finalized %d: final after %d passes", block, finalized.Number, passes)
		})
	}
}
