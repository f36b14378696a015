package receipts

import (
	"errors"
	"slices"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

func tracked(attempts ...common.Hash) pipeline.TrackedTx {
	tx := pipeline.TrackedTx{TxID: uuid.New(), Signer: "0xaa"}
	for i, h := range attempts {
		kind := pipeline.AttemptOriginal
		if i > 0 {
			kind = pipeline.AttemptReplace
		}
		tx.Attempts = append(tx.Attempts, pipeline.AttemptRef{Hash: h, Kind: kind})
	}
	return tx
}

// A receipt for any attempt settles the transaction; without one, a failed look-up is a
// failure and otherwise the node simply does not have it yet.
func TestSortReceipts(t *testing.T) {
	h1, h2, h3, h4 := common.HexToHash("0x1"), common.HexToHash("0x2"), common.HexToHash("0x3"), common.HexToHash("0x4")
	mined, replaced, failing, waiting := tracked(h1), tracked(h2, h3), tracked(h4), tracked(common.HexToHash("0x5"))
	results := []services.ReceiptResult{
		{Receipt: &services.Receipt{TxHash: h1, Status: 1}}, // mined
		{}, {Receipt: &services.Receipt{TxHash: h3, Status: 1}}, // the replacement was mined
		{Err: errors.New("header not found")}, // failing
		{},                                    // waiting
	}
	out := sortReceipts([]pipeline.TrackedTx{mined, replaced, failing, waiting}, results)
	if len(out.Found) != 2 || out.Found[0].TxID != mined.TxID || out.Found[1].TxID != replaced.TxID || out.Found[1].Kind != pipeline.AttemptReplace {
		t.Errorf("found %+v", out.Found)
	}
	if !slices.Equal(out.Failed, []uuid.UUID{failing.TxID}) || !slices.Equal(out.NotFound, []uuid.UUID{waiting.TxID}) {
		t.Errorf("failed %v, not found %v", out.Failed, out.NotFound)
	}
}

// Reading whole blocks stops at the first block the endpoint lacks, and picks one receipt
// per transaction.
func TestMatchBlocks(t *testing.T) {
	a, b := tracked(common.HexToHash("0xa")), tracked(common.HexToHash("0xb"), common.HexToHash("0xbb"))
	blocks := [][]services.Receipt{
		{{TxHash: common.HexToHash("0xff")}, {TxHash: common.HexToHash("0xa"), BlockNumber: 11}},
		{{TxHash: common.HexToHash("0xbb"), BlockNumber: 12}},
		nil, // not there yet
		{{TxHash: common.HexToHash("0xb"), BlockNumber: 14}},
	}
	scan := matchBlocks([]pipeline.TrackedTx{a, b}, 10, []uint64{11, 12, 13, 14}, blocks)
	if scan.Through != 12 {
		t.Errorf("read through %d, want 12", scan.Through)
	}
	if len(scan.Found) != 2 || scan.Found[0].TxID != a.TxID || scan.Found[1].TxID != b.TxID || scan.Found[1].Receipt.BlockNumber != 12 {
		t.Errorf("found %+v", scan.Found)
	}
	if none := matchBlocks([]pipeline.TrackedTx{a}, 10, []uint64{11}, [][]services.Receipt{nil}); none.Through != 10 || len(none.Found) != 0 {
		t.Errorf("nothing readable: %+v", none)
	}
}

// linkedHeaders is a chain of headers at heights from to to, each the parent of the next;
// fork tells one chain's hashes from another's.
func linkedHeaders(from, to uint64, fork byte) map[uint64]services.BlockHeader {
	hash := func(n uint64) common.Hash { return common.BytesToHash([]byte{fork, byte(n >> 8), byte(n)}) }
	headers := map[uint64]services.BlockHeader{}
	for n := from; n <= to; n++ {
		headers[n] = services.BlockHeader{Number: n, Hash: hash(n), ParentHash: hash(n - 1)}
	}
	return headers
}

func TestJudgeFinality(t *testing.T) {
	main := linkedHeaders(90, 120, 1)
	orphan := common.HexToHash("0x0f")
	tx := func(block uint64, hash common.Hash) MinedTx {
		return MinedTx{TxID: uuid.New(), Signer: "0xaa", BlockNumber: block, BlockHash: hash, Status: 1, Kind: pipeline.AttemptOriginal}
	}
	view := func(head, finalizedAt uint64, finalizedHash common.Hash, headers map[uint64]services.BlockHeader) chainView {
		v := chainView{head: head, finalizedAt: finalizedAt, finalizedHash: finalizedHash, canonical: headers}
		v.link()
		return v
	}
	// lagging serves the main chain only up to 111, though the head read elsewhere is 120.
	lagging := linkedHeaders(90, 111, 1)
	// mixed holds block 110 of the main chain and, from 111 on, a fork that replaced it.
	mixed := linkedHeaders(111, 120, 2)
	mixed[110] = main[110]
	// reorgedAbove is the main chain to 110 and a fork from 111 on.
	reorgedAbove := linkedHeaders(111, 120, 2)
	for n := uint64(90); n <= 110; n++ {
		reorgedAbove[n] = main[n]
	}
	tests := []struct {
		name        string
		tx          MinedTx
		view        chainView
		cfg         Config
		wantReorged bool
		wantFinal   bool
	}{
		{"deep enough", tx(100, main[100].Hash), view(120, 0, common.Hash{}, main), Config{Confirmations: 20}, false, true},
		{"exactly enough (head counts as one)", tx(110, main[110].Hash), view(120, 0, common.Hash{}, main), Config{Confirmations: 11}, false, true},
		{"one short", tx(110, main[110].Hash), view(120, 0, common.Hash{}, main), Config{Confirmations: 12}, false, false},
		{"block left the canonical chain", tx(110, orphan), view(120, 0, common.Hash{}, main), Config{Confirmations: 1}, true, false},
		{"height not served (lagging endpoint): wait", tx(115, main[115].Hash), view(120, 0, common.Hash{}, lagging), Config{Confirmations: 1}, false, false},
		{"depth counted on headers served, not on a head read elsewhere", tx(110, main[110].Hash), view(120, 0, common.Hash{}, lagging), Config{Confirmations: 3}, false, false},
		{"headers of two forks do not add up to a depth", tx(110, main[110].Hash), view(120, 0, common.Hash{}, mixed), Config{Confirmations: 2}, false, false},
		{"finalized tag reached", tx(100, main[100].Hash), view(120, 110, main[110].Hash, main), Config{UseFinalizedTag: true}, false, true},
		{"finalized tag not reached", tx(110, main[110].Hash), view(120, 105, main[105].Hash, main), Config{UseFinalizedTag: true, Confirmations: 1}, false, false},
		{"finalized block is another fork's", tx(100, main[100].Hash), view(120, 110, mixed[111].Hash, main), Config{UseFinalizedTag: true}, false, false},
		{"finalized block not linked down to the receipt's", tx(100, main[100].Hash), view(120, 111, mixed[111].Hash, reorgedAbove), Config{UseFinalizedTag: true}, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reorged, finals := judge([]MinedTx{tc.tx}, tc.view, tc.cfg)
			if got := len(reorged["0xaa"]) == 1; got != tc.wantReorged {
				t.Errorf("reorged = %v, want %v", got, tc.wantReorged)
			}
			if got := len(finals["0xaa"]) == 1; got != tc.wantFinal {
				t.Errorf("final = %v, want %v", got, tc.wantFinal)
			}
		})
	}
}

func TestFinalization(t *testing.T) {
	tests := []struct {
		kind         pipeline.AttemptKind
		status       uint64
		wantState    domain.State
		wantSubState domain.SubState
	}{
		{pipeline.AttemptOriginal, 1, domain.StateConfirmed, ""},
		{pipeline.AttemptReplace, 1, domain.StateConfirmed, ""},
		{pipeline.AttemptOriginal, 0, domain.StateFailedFinal, domain.SubStateReverted},
		{pipeline.AttemptCancel, 1, domain.StateFailedFinal, domain.SubStateCancelled},
		{pipeline.AttemptPlaceholder, 1, domain.StateFailedFinal, domain.SubStateCancelled},
	}
	for _, tc := range tests {
		f := finalization(MinedTx{Kind: tc.kind, Status: tc.status})
		if f.State != tc.wantState || f.SubState != tc.wantSubState {
			t.Errorf("%s status %d: %s/%s, want %s/%s", tc.kind, tc.status, f.State, f.SubState, tc.wantState, tc.wantSubState)
		}
	}
}
