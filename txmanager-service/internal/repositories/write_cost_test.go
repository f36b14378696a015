package repositories_test

import (
	"context"
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/receipts"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// A broadcast outcome that repeats what the row already says (a rebroadcast the node
// accepts again) writes no new row version; one that changes the sub-state, the error or
// the lease epoch that wrote it does, and under a lost lease the write is FENCED either way.
// The outcome of an attempt that is no longer the current one is not written.
func TestRecordBroadcastsWritesOnlyChanges(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := t.Context()
	const signer = "0x00000000000000000000000000000000000000ab"
	lease := acquireLease(t, pool, signer, "node-a")
	id := uuid.New()
	current, replaced := common.HexToHash("0xc1"), common.HexToHash("0xa1")
	if _, err := pool.Exec(ctx, `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, sub_state, fencing_token, tx_hash)
		VALUES (1337, $1, $2, '\x00', 0, '{"value":"0"}', 'TRACKING', 'SIGNED', $3, $4)`, id, signer, int64(lease.Token), current.Hex()); err != nil {
		t.Fatal(err)
	}
	attempts := repositories.NewAttemptRepository(pool, testChain())
	version := func() string {
		var xmin string
		if err := pool.QueryRow(ctx, "SELECT xmin::text FROM managed_tx WHERE tx_id = $1", id).Scan(&xmin); err != nil {
			t.Fatal(err)
		}
		return xmin
	}
	tests := []struct {
		name       string
		lease      domain.Lease
		outcome    pipeline.BroadcastOutcome
		newVersion bool
	}{
		{"first outcome", lease, pipeline.BroadcastOutcome{TxID: id, TxHash: current, SubState: domain.SubStateSubmitted}, true},
		{"the same again", lease, pipeline.BroadcastOutcome{TxID: id, TxHash: current, SubState: domain.SubStateSubmitted}, false},
		{"an error", lease, pipeline.BroadcastOutcome{TxID: id, TxHash: current, SubState: domain.SubStateBroadcastFailed, LastError: "boom"}, true},
		{"the same error", lease, pipeline.BroadcastOutcome{TxID: id, TxHash: current, SubState: domain.SubStateBroadcastFailed, LastError: "boom"}, false},
		{"another error", lease, pipeline.BroadcastOutcome{TxID: id, TxHash: current, SubState: domain.SubStateBroadcastFailed, LastError: "bang"}, true},
		{"accepted, error cleared", lease, pipeline.BroadcastOutcome{TxID: id, TxHash: current, SubState: domain.SubStateSubmitted}, true},
		// An attempt a newer one replaced (a stuck resolution stored while its rebroadcast
		// was on its way): its answer is not the current attempt's.
		{"an older attempt refused as underpriced", lease, pipeline.BroadcastOutcome{TxID: id, TxHash: replaced, SubState: domain.SubStateUnderpriced,
			LastError: "replacement transaction underpriced"}, false},
	}
	for _, tt := range tests {
		before := version()
		if err := attempts.RecordBroadcasts(ctx, tt.lease, []pipeline.BroadcastOutcome{tt.outcome}); err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if got := version() != before; got != tt.newVersion {
			t.Errorf("%s: new row version %v, want %v", tt.name, got, tt.newVersion)
		}
	}

	// Another epoch of the lease (the same owner after a lapse) stamps the row even when the
	// outcome repeats: the row says which epoch wrote it last.
	if _, err := pool.Exec(ctx, "UPDATE signer_lease SET expires_at = now() - interval '1 minute' WHERE signer = $1", signer); err != nil {
		t.Fatal(err)
	}
	regrant, err := repositories.NewLeaseRepository(pool, testChain()).AcquireOrRenew(ctx, signer, "node-a", time.Minute, 0)
	if err != nil || !regrant.Acquired || regrant.Token == lease.Token {
		t.Fatalf("re-acquire lease: %+v, %v; want a new token", regrant, err)
	}
	relet := domain.Lease{Signer: signer, Owner: "node-a", Token: regrant.Token, ExpiresAt: regrant.ExpiresAt}
	if err := attempts.RecordBroadcasts(ctx, relet, []pipeline.BroadcastOutcome{{TxID: id, TxHash: current, SubState: domain.SubStateSubmitted}}); err != nil {
		t.Fatal(err)
	}
	var token int64
	if err := pool.QueryRow(ctx, "SELECT fencing_token FROM managed_tx WHERE tx_id = $1", id).Scan(&token); err != nil || token != int64(regrant.Token) {
		t.Fatalf("fencing_token = %d, %v; want the new epoch's %d", token, err, regrant.Token)
	}
	// The old epoch is fenced even for an outcome that would change nothing.
	if err := attempts.RecordBroadcasts(ctx, lease, []pipeline.BroadcastOutcome{{TxID: id, SubState: domain.SubStateSubmitted}}); !errors.Is(err, domain.ErrFenced) {
		t.Fatalf("outcome under the old epoch: %v, want FENCED", err)
	}
}

// The migration leaves managed_tx room in each page for HOT updates and drops the two
// indexes no query used: an update that touches no indexed column (a broadcast outcome, a
// resubmission claim, which rewrites next_resubmit_at) is then HOT where its page has room,
// as a page of a few rows has. Before the migration the claim was never HOT.
func TestManagedTxUpdatesStayHOT(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	ctx := t.Context()
	var options []string
	if err := pool.QueryRow(ctx, "SELECT coalesce(reloptions, '{}') FROM pg_class WHERE relname = 'managed_tx'").Scan(&options); err != nil {
		t.Fatal(err)
	}
	if len(options) != 1 || options[0] != "fillfactor=60" {
		t.Fatalf("managed_tx options %v, want fillfactor=60", options)
	}
	checkIndexes(t, pool, map[string]bool{"managed_tx_tx_hash_idx": false, "managed_tx_resubmit_idx": false})

	const signer = "0x00000000000000000000000000000000000000ac"
	lease := acquireLease(t, pool, signer, "node-a")
	const rows = 5
	ids := make([]uuid.UUID, rows)
	for i := range ids {
		ids[i] = uuid.New()
		if _, err := pool.Exec(ctx, `INSERT INTO managed_tx (chain_id, tx_id, signer, request_id, intent_hash, nonce, payload, state, sub_state, tx_hash, fencing_token, next_resubmit_at)
			VALUES (1337, $1, $2, $5, '\x00', $3, '{"to":"0x00000000000000000000000000000000000000ff","value":"1"}', 'TRACKING', 'SIGNED', $6, $4, now() - interval '1 second')`,
			ids[i], signer, i, int64(lease.Token), ids[i].String(), common.BigToHash(big.NewInt(int64(i+1))).Hex()); err != nil {
			t.Fatal(err)
		}
	}
	outcomes := make([]pipeline.BroadcastOutcome, rows)
	for i, id := range ids {
		outcomes[i] = pipeline.BroadcastOutcome{TxID: id, TxHash: common.BigToHash(big.NewInt(int64(i + 1))), SubState: domain.SubStateSubmitted}
	}
	updated0, hot0 := managedTxUpdates(t, pool, 0)
	if err := repositories.NewAttemptRepository(pool, testChain()).RecordBroadcasts(ctx, lease, outcomes); err != nil {
		t.Fatal(err)
	}
	if _, err := repositories.NewSubmittingRepository(pool, testChain()).ClaimResubmits(context.WithoutCancel(ctx), lease, ids, time.Minute); err != nil {
		t.Fatal(err)
	}
	updated, hotUpdated := managedTxUpdates(t, pool, updated0+2*rows)
	if updated-updated0 != 2*rows || hotUpdated-hot0 != 2*rows {
		t.Fatalf("%d updates of which %d HOT, want %d all HOT", updated-updated0, hotUpdated-hot0, 2*rows)
	}
}

// A receipt held until finality is written with the final state: one row version holds
// both, with its completion. The write is refused where the row already has a receipt on
// record (another pass wrote one) and FENCED under a lost lease; a receipt on record is
// finalized as before, judged by its block.
func TestFinalizeWritesAHeldReceiptWithTheFinalState(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := t.Context()
	const signer = "0x00000000000000000000000000000000000000ac"
	lease := acquireLease(t, pool, signer, "node-a")
	stale := domain.Lease{Signer: signer, Owner: "node-a", Token: lease.Token + 1, ExpiresAt: lease.ExpiresAt}
	insert := func(nonce int, receipt, blockHash string) uuid.UUID {
		id := uuid.New()
		if _, err := pool.Exec(ctx, `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, sub_state, tx_hash, fencing_token,
			receipt, block_number, block_hash) VALUES (1337, $1, $2, '\x00', $3, '{"value":"0"}', 'TRACKING', 'SIGNED', '0xold', $4,
			NULLIF($5, '')::jsonb, CASE WHEN $5 = '' THEN NULL ELSE 7 END, NULLIF($6, ''))`,
			id, signer, nonce, int64(lease.Token), receipt, blockHash); err != nil {
			t.Fatal(err)
		}
		return id
	}
	block := common.HexToHash("0xb1")
	heldFor := func(id uuid.UUID, status uint64) receipts.MinedTx {
		found := receipts.FoundReceipt{TxID: id, Signer: signer, Kind: pipeline.AttemptOriginal,
			Receipt: services.Receipt{TxHash: common.HexToHash("0x11"), Status: status, BlockNumber: 9, BlockHash: block, GasUsed: 21000}}
		return receipts.MinedTx{TxID: id, Signer: signer, BlockNumber: 9, BlockHash: block, Status: status, Kind: pipeline.AttemptOriginal, Held: &found}
	}
	type row struct {
		state, txHash, blockHash, receiptBlock string
		blockNumber                            int64
		completions                            int64
	}
	read := func(id uuid.UUID) row {
		var r row
		if err := pool.QueryRow(ctx, `SELECT state, tx_hash, COALESCE(block_hash, ''), COALESCE(receipt->>'blockHash', ''), COALESCE(block_number, 0),
			(SELECT count(*) FROM tx_completions c WHERE c.tx_id = m.tx_id) FROM managed_tx m WHERE tx_id = $1`, id).
			Scan(&r.state, &r.txHash, &r.blockHash, &r.receiptBlock, &r.blockNumber, &r.completions); err != nil {
			t.Fatal(err)
		}
		return r
	}
	store := repositories.NewReceiptRepository(pool, testChain())
	recorded := common.HexToHash("0xb2").Hex()
	onRecord := `{"status": 1, "kind": "ORIGINAL", "blockHash": "` + recorded + `"}`
	tests := []struct {
		name      string
		lease     domain.Lease
		receipt   string // on record before; "" none
		blockHash string
		final     func(id uuid.UUID) receipts.MinedTx
		wantErr   bool
		wantN     int
		want      row
	}{
		{"held receipt written with the final state", lease, "", "", func(id uuid.UUID) receipts.MinedTx { return heldFor(id, 1) }, false, 1,
			row{state: "CONFIRMED", txHash: common.HexToHash("0x11").Hex(), blockHash: block.Hex(), receiptBlock: block.Hex(), blockNumber: 9, completions: 1}},
		{"held receipt, another already on record", lease, onRecord, recorded, func(id uuid.UUID) receipts.MinedTx { return heldFor(id, 1) }, false, 0,
			row{state: "TRACKING", txHash: "0xold", blockHash: recorded, receiptBlock: recorded, blockNumber: 7}},
		{"held receipt under a lost lease", stale, "", "", func(id uuid.UUID) receipts.MinedTx { return heldFor(id, 1) }, true, 0,
			row{state: "TRACKING", txHash: "0xold"}},
		{"receipt on record, final in its block", lease, onRecord, recorded, func(id uuid.UUID) receipts.MinedTx {
			return receipts.MinedTx{TxID: id, Signer: signer, BlockNumber: 7, BlockHash: common.HexToHash(recorded), Status: 1}
		}, false, 1, row{state: "CONFIRMED", txHash: "0xold", blockHash: recorded, receiptBlock: recorded, blockNumber: 7, completions: 1}},
		{"receipt on record, judged in another block", lease, onRecord, recorded, func(id uuid.UUID) receipts.MinedTx {
			return receipts.MinedTx{TxID: id, Signer: signer, BlockNumber: 7, BlockHash: block, Status: 1}
		}, false, 0, row{state: "TRACKING", txHash: "0xold", blockHash: recorded, receiptBlock: recorded, blockNumber: 7}},
	}
	for i, tt := range tests {
		id := insert(i, tt.receipt, tt.blockHash)
		n, err := store.Finalize(ctx, tt.lease, []receipts.Finalization{{Tx: tt.final(id), State: domain.StateConfirmed}})
		var fenced *domain.FencedError
		if tt.wantErr != errors.As(err, &fenced) || (!tt.wantErr && err != nil) {
			t.Fatalf("%s: error %v, want fenced %v", tt.name, err, tt.wantErr)
		}
		if n != tt.wantN {
			t.Errorf("%s: %d finalized, want %d", tt.name, n, tt.wantN)
		}
		if got := read(id); got != tt.want {
			t.Errorf("%s: row %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
