package receipts

import (
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/services"
)

// What the catch-up proved counts towards a deep receipt's finality only when its top links
// into the headers the pass read up to the finalized block, and that block is above the
// top; otherwise the receipt waits, and a pass whose headers contradict the catch-up drops
// it.
func TestCatchUpProvesOnlyWhatLinksToTheFinalizedBlock(t *testing.T) {
	hash := func(branch byte, h uint64) common.Hash {
		return common.BytesToHash([]byte{branch, byte(h >> 8), byte(h)})
	}
	// chain reads the headers from..to of branch a (of b at and above fork), each naming the
	// one below as its parent.
	chain := func(from, to, fork uint64) map[uint64]services.BlockHeader {
		out := map[uint64]services.BlockHeader{}
		for h := from; h <= to; h++ {
			branch, parent := byte('a'), byte('a')
			if fork > 0 && h >= fork {
				branch = 'b'
			}
			if fork > 0 && h > fork {
				parent = 'b'
			}
			out[h] = services.BlockHeader{Number: h, Hash: hash(branch, h), ParentHash: hash(parent, h-1)}
		}
		return out
	}
	segment := catchUpSegment{valid: true, from: 50, top: 100, topHash: hash('a', 100), at: map[uint64]common.Hash{50: hash('a', 50)}}
	tests := []struct {
		name        string
		finalizedAt uint64
		read        map[uint64]services.BlockHeader
		receipt     common.Hash
		wantHolds   bool
		wantFinal   bool
		wantReorged bool
	}{
		{"the top links into the headers up to the finalized block", 150, chain(101, 150, 0), hash('a', 50), true, true, false},
		{"the finalized block read below the top", 90, chain(90, 90, 0), hash('a', 50), true, false, false},
		{"the header above the top does not link to it", 150, chain(101, 150, 100), hash('a', 50), false, false, false},
		{"another block read at the top", 150, chain(100, 150, 100), hash('a', 50), false, false, false},
		{"the receipt's block is not the one the catch-up read", 150, chain(101, 150, 0), hash('c', 50), true, false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			view := chainView{head: 200, finalizedAt: tc.finalizedAt, finalizedHash: tc.read[tc.finalizedAt].Hash, canonical: tc.read}
			if holds := view.addCatchUp(segment); holds != tc.wantHolds {
				t.Fatalf("holds %v, want %v", holds, tc.wantHolds)
			}
			tx := MinedTx{TxID: uuid.New(), Signer: "0xsigner", BlockNumber: 50, BlockHash: tc.receipt, Status: 1}
			reorged, finals := judge([]MinedTx{tx}, view, Config{UseFinalizedTag: true})
			if final := len(finals["0xsigner"]) == 1; final != tc.wantFinal {
				t.Fatalf("final %v, want %v", final, tc.wantFinal)
			}
			if got := len(reorged["0xsigner"]) == 1; got != tc.wantReorged {
				t.Fatalf("reorged %v, want %v", got, tc.wantReorged)
			}
		})
	}
}
