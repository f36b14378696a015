package workers

import (
	"context"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/pipeline"
)

func TestTrackUnsent(t *testing.T) {
	tracked := func() pipeline.TrackedTx {
		return pipeline.TrackedTx{TxID: uuid.New(), Signer: "0xaa", Nonce: 7, Attempts: []pipeline.AttemptRef{{Hash: common.HexToHash("0x01"), Kind: pipeline.AttemptOriginal}}}
	}
	tests := []struct {
		name string
		// scanned is the checker's covered head when the transactions are stored.
		scanned uint64
		// existing is already scheduled (listed by the database) before the note.
		existing bool
		// wantNoted: scheduled as known absent through scanned, so no look-up by hash
		// before a new block.
		wantNoted bool
	}{
		{name: "stored after blocks were covered: absent through them", scanned: 41, wantNoted: true},
		{name: "nothing covered yet: left to the first pass's look-up", scanned: 0},
		{name: "already scheduled: the schedule's own state stands", scanned: 41, existing: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &ReceiptChecker{entries: map[uuid.UUID]*receiptEntry{}, scannedThrough: tt.scanned}
			tx := tracked()
			if tt.existing {
				c.entries[tx.TxID] = &receiptEntry{tx: tx}
			}
			c.trackUnsent([]pipeline.TrackedTx{tx})
			e, scheduled := c.entries[tx.TxID]
			switch {
			case tt.wantNoted && (!scheduled || !e.notFound || e.notFoundAtHead != tt.scanned || e.tx.Attempts[0].Hash != tx.Attempts[0].Hash):
				t.Fatalf("entry %+v, want it scheduled as not found through block %d", e, tt.scanned)
			case !tt.wantNoted && scheduled && e.notFound:
				t.Fatalf("entry %+v marked absent, want it looked up by hash", e)
			case !tt.wantNoted && !tt.existing && scheduled:
				t.Fatalf("entry %+v scheduled before any block was covered", e)
			}
		})
	}
}

// A head below what was covered (read from a fork, or a sequencer that rolled back) makes
// nothing known absent above it any more: the entries are looked up again once the chain
// passes that head, instead of waiting for the periodic recheck.
func TestLowerHeadForgetsWhatWasCoveredAboveIt(t *testing.T) {
	above := &receiptEntry{notFound: true, notFoundAtHead: 110}
	below := &receiptEntry{notFound: true, notFoundAtHead: 100}
	c := &ReceiptChecker{entries: map[uuid.UUID]*receiptEntry{uuid.New(): above, uuid.New(): below}, scannedThrough: 110}
	if mined := c.scanBlocks(context.Background(), 108); mined != 0 {
		t.Fatalf("scanBlocks recorded %d receipts on a lower head", mined)
	}
	if c.scannedThrough != 108 || above.notFoundAtHead != 108 || below.notFoundAtHead != 100 {
		t.Fatalf("covered through %d, entries absent through %d and %d; want 108, 108 and 100", c.scannedThrough, above.notFoundAtHead, below.notFoundAtHead)
	}
}
