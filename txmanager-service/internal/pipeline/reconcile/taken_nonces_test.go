package reconcile_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/params"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/reconcile"
	"github.com/bionicotaku/txmanager-service/internal/services"
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
