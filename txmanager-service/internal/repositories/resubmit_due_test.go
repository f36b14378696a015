package repositories_test

import (
	"strings"
	"testing"

	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// What is due to be broadcast again: broadcast, unmined transactions (stuck ones too) whose
// time has come, lowest nonce first, each with its current attempt to send again or
// re-price, the intent's own fee caps, and every hash it was sent under.
func TestListResubmitDue(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	store := repositories.NewSubmittingRepository(pool, testChain())
	signer := testsupport.SignerAddress(280).Hex()
	hash := func(d string) string { return "0x" + strings.Repeat(d, 64) }
	type row struct {
		tx    txRow
		due   bool
		mined bool
	}
	rows := []row{
		{tx: txRow{signer: signer, nonce: 0, state: "TRACKING", subState: "SIGNED", hash: hash("b")}, due: true},
		{tx: txRow{signer: signer, nonce: 1, state: "TRACKING", subState: "SIGNED", hash: hash("c")}},
		{tx: txRow{signer: signer, nonce: 2, state: "STUCK", hash: hash("d")}, due: true},
		{tx: txRow{signer: signer, nonce: 3, state: "TRACKING", subState: "SIGNED", hash: hash("e")}, due: true, mined: true},
	}
	ids := make(map[uint64]string)
	for _, r := range rows {
		id := insertTx(t, pool, r.tx)
		ids[uint64(r.tx.nonce)] = id.String()
		insertAttempt(t, pool, r.tx, id, r.tx.hash, "REPLACE", 200, 20)
		due := "now() + interval '1 hour'"
		if r.due {
			due = "now() - interval '1 second'"
		}
		if _, err := pool.Exec(t.Context(), "UPDATE managed_tx SET next_resubmit_at = "+due+" WHERE tx_id = $1", id); err != nil {
			t.Fatal(err)
		}
		if r.mined {
			if _, err := pool.Exec(t.Context(), `UPDATE managed_tx SET receipt = '{"status": 1}', block_number = 7, block_hash = '0x07' WHERE tx_id = $1`, id); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Nonce 0 was first sent under another hash, and carries the intent's own caps.
	first := rows[0].tx
	firstID := ids[0]
	if _, err := pool.Exec(t.Context(), `UPDATE managed_tx SET payload = payload || '{"maxFeePerGas":"500","maxPriorityFeePerGas":"5","gasLimit":0,"effectiveGasLimit":25200}' WHERE tx_id = $1`, firstID); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `INSERT INTO tx_attempt (chain_id, tx_hash, tx_id, signer, nonce, kind, max_fee_per_gas, max_priority_fee_per_gas, gas_limit, raw_tx, fencing_token)
		VALUES (1337, $1, $2, $3, 0, 'ORIGINAL', 100, 2, 21000, '\x01', 1)`, hash("a"), firstID, first.signer); err != nil {
		t.Fatal(err)
	}

	due, err := store.ListResubmitDue(t.Context(), signer, 10)
	if err != nil || len(due) != 2 || due[0].TxID.String() != ids[0] || due[1].TxID.String() != ids[2] {
		t.Fatalf("due %+v (%v), want nonces 0 and 2 in that order", due, err)
	}
	d := due[0]
	if d.Current.Hex() != hash("b") || d.Kind != pipeline.AttemptReplace || d.MaxFee.Int64() != 200 || d.MaxTip.Int64() != 20 ||
		d.IntentMaxFee == nil || d.IntentMaxFee.Int64() != 500 || d.IntentMaxTip.Int64() != 5 || len(d.AllHashes) != 2 || len(d.Raw) == 0 {
		t.Fatalf("nonce 0 due as %+v, want its current replacement with its fees, the intent's caps and both hashes", d)
	}
	if due[1].IntentMaxFee != nil {
		t.Fatalf("nonce 2 has no cap of its own, got %s", due[1].IntentMaxFee)
	}
	if d.IntentGasLimit != 0 || d.AdmittedGasLimit != 25_200 || due[1].IntentGasLimit != 21_000 || due[1].AdmittedGasLimit != 21_000 {
		t.Fatalf("gas limits named and admitted: nonce 0 %d and %d, want none and 25200; nonce 2 %d and %d, want 21000 and 21000",
			d.IntentGasLimit, d.AdmittedGasLimit, due[1].IntentGasLimit, due[1].AdmittedGasLimit)
	}
	if page, err := store.ListResubmitDue(t.Context(), signer, 1); err != nil || len(page) != 1 || page[0].TxID.String() != ids[0] {
		t.Fatalf("a page of one: %+v (%v), want nonce 0", page, err)
	}
}
