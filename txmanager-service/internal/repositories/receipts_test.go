package repositories_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/receipts"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// A broadcast transaction awaits a receipt for any of its attempts; the receipt of the one
// mined is recorded (fenced) and the transaction waits for finality; a reorg that replaces
// its block puts it back to awaiting a receipt, due for resubmission, but only for the block
// it was recorded in.
func TestReceiptRepositoryFollowsAReceiptThroughAReorg(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	store := repositories.NewReceiptRepository(pool, testChain())
	signer := testsupport.SignerAddress(270).Hex()
	lease := acquireLease(t, pool, signer, "node-a")
	row := txRow{signer: signer, nonce: 0, state: "TRACKING", subState: "SIGNED", hash: "0x" + strings.Repeat("a", 64)}
	id := insertTx(t, pool, row)
	original, replacement := row.hash, "0x"+strings.Repeat("b", 64)
	insertAttempt(t, pool, row, id, original, "ORIGINAL", 100, 2)
	insertAttempt(t, pool, row, id, replacement, "REPLACE", 120, 3)

	awaiting, err := store.ListAwaitingReceipt(t.Context(), []string{signer})
	if err != nil || len(awaiting) != 1 || len(awaiting[0].Attempts) != 2 || awaiting[0].TxID != id ||
		awaiting[0].Attempts[0].Hash.Hex() != original || awaiting[0].Attempts[1].Kind != pipeline.AttemptReplace {
		t.Fatalf("awaiting %+v (%v), want the transaction with both attempts, oldest first", awaiting, err)
	}
	block := common.HexToHash("0x" + strings.Repeat("c", 64))
	found := []receipts.FoundReceipt{{TxID: id, Signer: signer, Kind: pipeline.AttemptReplace,
		Receipt: services.Receipt{TxHash: common.HexToHash(replacement), Status: 1, BlockNumber: 7, BlockHash: block, GasUsed: 21000}}}
	stale := lease
	stale.Token++
	if _, err := store.RecordReceipts(t.Context(), stale, found); !errors.Is(err, domain.ErrFenced) {
		t.Fatalf("a receipt recorded under a lease no longer held: %v, want FENCED", err)
	}
	if n, err := store.RecordReceipts(t.Context(), lease, found); err != nil || n != 1 {
		t.Fatalf("recorded %d (%v), want 1", n, err)
	}
	if awaiting, err := store.ListAwaitingReceipt(t.Context(), []string{signer}); err != nil || len(awaiting) != 0 {
		t.Fatalf("awaiting after the receipt: %+v (%v), want none", awaiting, err)
	}
	mined, err := store.ListMined(t.Context(), []string{signer})
	if err != nil || len(mined) != 1 || mined[0].BlockNumber != 7 || mined[0].BlockHash != block || mined[0].Status != 1 || mined[0].Kind != pipeline.AttemptReplace {
		t.Fatalf("mined %+v (%v), want the replacement's receipt in block 7", mined, err)
	}

	elsewhere := mined[0]
	elsewhere.BlockHash = common.HexToHash("0x" + strings.Repeat("d", 64))
	if n, err := store.RevertReorged(t.Context(), lease, []receipts.MinedTx{elsewhere}); err != nil || n != 0 {
		t.Fatalf("a revert for a block it was not recorded in: %d (%v), want nothing reverted", n, err)
	}
	if n, err := store.RevertReorged(t.Context(), lease, mined); err != nil || n != 1 {
		t.Fatalf("reverted %d (%v), want 1", n, err)
	}
	if mined, err := store.ListMined(t.Context(), []string{signer}); err != nil || len(mined) != 0 {
		t.Fatalf("mined after the reorg: %+v (%v), want none", mined, err)
	}
	var subState string
	var due bool
	if err := pool.QueryRow(t.Context(), "SELECT sub_state, next_resubmit_at <= now() FROM managed_tx WHERE tx_id = $1", id).Scan(&subState, &due); err != nil ||
		subState != "REORGED" || !due {
		t.Fatalf("after the reorg: sub-state %q, resubmission due %t (%v); want REORGED and due at once", subState, due, err)
	}
	if awaiting, err := store.ListAwaitingReceipt(t.Context(), []string{signer}); err != nil || len(awaiting) != 1 {
		t.Fatalf("awaiting after the reorg: %+v (%v), want it looked up again", awaiting, err)
	}
}

// An earlier attempt mined after a later one was stored (a cancellation, a re-price), then
// reorged out: the current attempt is again the newest stored, so resubmission goes on with
// the cancellation rather than the original intent the operator cancelled.
func TestAReorgedOutAttemptIsNotLeftCurrent(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	store := repositories.NewReceiptRepository(pool, testChain())
	signer := testsupport.SignerAddress(271).Hex()
	lease := acquireLease(t, pool, signer, "node-a")
	cancel := "0x" + strings.Repeat("b", 64)
	row := txRow{signer: signer, nonce: 0, state: "TRACKING", subState: "SIGNED", hash: cancel}
	id := insertTx(t, pool, row)
	original := "0x" + strings.Repeat("a", 64)
	insertAttempt(t, pool, row, id, original, "ORIGINAL", 100, 2)
	insertAttempt(t, pool, row, id, cancel, "CANCEL", 130, 3)
	block := common.HexToHash("0x" + strings.Repeat("c", 64))
	found := []receipts.FoundReceipt{{TxID: id, Signer: signer, Kind: pipeline.AttemptOriginal,
		Receipt: services.Receipt{TxHash: common.HexToHash(original), Status: 1, BlockNumber: 7, BlockHash: block, GasUsed: 21000}}}
	if n, err := store.RecordReceipts(t.Context(), lease, found); err != nil || n != 1 {
		t.Fatalf("recorded %d (%v), want 1", n, err)
	}
	mined, err := store.ListMined(t.Context(), []string{signer})
	if err != nil || len(mined) != 1 {
		t.Fatalf("mined %+v (%v)", mined, err)
	}
	if n, err := store.RevertReorged(t.Context(), lease, mined); err != nil || n != 1 {
		t.Fatalf("reverted %d (%v), want 1", n, err)
	}
	var current string
	if err := pool.QueryRow(t.Context(), "SELECT tx_hash FROM managed_tx WHERE tx_id = $1", id).Scan(&current); err != nil || current != cancel {
		t.Fatalf("the current attempt after the reorg: %s (%v), want the cancellation %s", current, err, cancel)
	}
}
