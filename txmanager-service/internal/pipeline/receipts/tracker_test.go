package receipts_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/receipts"
)

// A receipt for any attempt of a transaction settles it: a replacement that was mined is
// recognised as such; a transaction the node has not mined is simply not found.
func TestCheckReceiptsFindsWhicheverAttemptWasMined(t *testing.T) {
	t.Parallel()
	s := newStage(t)
	s.send(2, nil)
	replacement := s.resign(1, pipeline.AttemptReplace)
	block := s.mine(1)
	s.send(1, nil) // nonce 2, left in the pool
	headers, err := s.sim.HeadersByNumber(ctx(t), []uint64{block})
	if err != nil {
		t.Fatal(err)
	}

	out := s.lookUp(s.tracker(receipts.Config{Confirmations: 20}))
	want := map[uuid.UUID]struct {
		kind pipeline.AttemptKind
		hash common.Hash
	}{
		s.row(0).id: {pipeline.AttemptOriginal, s.row(0).hash},
		s.row(1).id: {pipeline.AttemptReplace, replacement},
	}
	if len(out.Found) != len(want) {
		t.Fatalf("found %+v, want the two mined transactions", out.Found)
	}
	for _, f := range out.Found {
		w, ok := want[f.TxID]
		if !ok || f.Kind != w.kind || f.Receipt.TxHash != w.hash || f.Receipt.BlockNumber != block || f.Receipt.BlockHash != headers[0].Hash ||
			f.Receipt.Status != 1 || f.Signer != s.lease.Signer {
			t.Errorf("found %+v, want the %s attempt %s mined in block %d", f, w.kind, w.hash.Hex(), block)
		}
	}
	if !slices.Equal(out.NotFound, []uuid.UUID{s.row(2).id}) || len(out.Failed) != 0 {
		t.Fatalf("not found %v, failed %v; want only the unmined transaction not found", out.NotFound, out.Failed)
	}
}

// Receipts close to finality are held in memory and written with the final state; the
// others are written as MINED at once, each signer's under the lease this node holds, and
// left to their owner when it holds it no longer. Either way the listing of transactions
// awaiting a receipt no longer shows them.
func TestRecordReceiptsHoldsOnlyThoseCloseToFinality(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		cfg       receipts.Config
		leaseLost bool
		wantHeld  bool
		// wantWritten: the receipts are on record (MINED); otherwise the rows are as sent.
		wantWritten bool
	}{
		{name: "many confirmations to go: written as MINED", cfg: receipts.Config{Confirmations: 20}, wantWritten: true},
		{name: "final within a few blocks: held for the final write", cfg: receipts.Config{Confirmations: 2}, wantHeld: true},
		{name: "the node's finalized block decides: written", cfg: receipts.Config{UseFinalizedTag: true}, wantWritten: true},
		{name: "the lease is no longer this node's: left to its owner", cfg: receipts.Config{Confirmations: 20}, leaseLost: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStage(t)
			s.send(2, nil)
			head := s.mine(1)
			tracker := s.tracker(tc.cfg)
			out := s.lookUp(tracker)
			if tc.leaseLost {
				if err := s.node.Leases.LetGo(ctx(t), s.lease.Signer); err != nil {
					t.Fatal(err)
				}
			}

			n, err := tracker.RecordReceipts(ctx(t), out.Found, head)
			if wantN := map[bool]int{true: 0, false: 2}[tc.leaseLost]; (err != nil) != tc.leaseLost || n != wantN ||
				(tc.leaseLost && !errors.Is(err, receipts.ErrLeaseNotTrusted)) {
				t.Fatalf("RecordReceipts = %d, %v; want %d held or written, and an error for a lease not trusted: %v", n, err, wantN, tc.leaseLost)
			}
			if tracker.HoldsReceipts() != tc.wantHeld {
				t.Fatalf("holds receipts: %v, want %v", tracker.HoldsReceipts(), tc.wantHeld)
			}
			for _, row := range s.rows() {
				written := row.subState == "MINED" && row.block == head && row.receiptHash == row.hash
				untouched := row.subState == "SIGNED" && row.block == 0
				if row.state != string(domain.StateTracking) || (tc.wantWritten && !written) || (!tc.wantWritten && !untouched) {
					t.Fatalf("row %+v, want TRACKING with its receipt on record: %v", row, tc.wantWritten)
				}
			}
			awaiting, err := tracker.AwaitingReceipt(ctx(t), s.signers())
			if wantAwaiting := map[bool]int{true: 2, false: 0}[tc.leaseLost]; err != nil || len(awaiting) != wantAwaiting {
				t.Fatalf("awaiting %d, %v; want %d (a receipt held or on record is not looked up again)", len(awaiting), err, wantAwaiting)
			}
		})
	}
}

// Reading whole blocks finds the receipts of the transactions awaiting them in the blocks
// after from up to to, and stops at the first block the node does not have yet.
func TestReceiptsInBlocks(t *testing.T) {
	t.Parallel()
	s := newStage(t)
	s.send(2, nil)
	block := s.mine(1)
	s.send(1, nil) // nonce 2, left in the pool
	tracker := s.tracker(receipts.Config{Confirmations: 20})
	awaiting, err := tracker.AwaitingReceipt(ctx(t), s.signers())
	if err != nil || len(awaiting) != 3 {
		t.Fatalf("awaiting %d, %v; want 3", len(awaiting), err)
	}
	sent := map[uint64]common.Hash{}
	for _, row := range s.rows() {
		sent[row.nonce] = row.hash
	}
	tests := []struct {
		name        string
		from, to    uint64
		wantFound   []uint64 // nonces
		wantThrough uint64
	}{
		{name: "the block holding them", from: block - 1, to: block, wantFound: []uint64{0, 1}, wantThrough: block},
		{name: "blocks before it", from: 0, to: block - 1, wantThrough: block - 1},
		{name: "nothing to read", from: block, to: block, wantThrough: block},
		{name: "beyond the head: read up to the head", from: block - 1, to: block + 3, wantFound: []uint64{0, 1}, wantThrough: block},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			scan, err := tracker.ReceiptsInBlocks(ctx(t), awaiting, tc.from, tc.to)
			if err != nil {
				t.Fatal(err)
			}
			var nonces []uint64
			for _, f := range scan.Found {
				if f.Receipt.BlockNumber != block || f.Receipt.TxHash != sent[f.Nonce] {
					t.Errorf("found %+v, want the receipt of the row's attempt in block %d", f, block)
				}
				nonces = append(nonces, f.Nonce)
			}
			slices.Sort(nonces)
			if !slices.Equal(nonces, tc.wantFound) || scan.Through != tc.wantThrough {
				t.Fatalf("found nonces %v through block %d, want %v through %d", nonces, scan.Through, tc.wantFound, tc.wantThrough)
			}
		})
	}
}
