package main

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// readChainRecords reads a chain's rows as the invariants expect them, on a real migrated
// database: only that chain's rows, open rows without hash or block, completions counted.
func TestReadChainRecords(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, err := pgx.Connect(ctx, testsupport.MigratedDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close(ctx) })

	const chain, otherChain = 1337, 31337
	batch := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	txs := []struct {
		id     string
		chain  int64
		nonce  int64
		state  domain.State
		batch  int
		hash   any
		block  any
		signer string
	}{
		{"00000000-0000-4000-8000-000000000001", chain, 0, domain.StateConfirmed, 0, "0xaa01", int64(7), signerA},
		{"00000000-0000-4000-8000-000000000002", chain, 2, domain.StateFailedFinal, 0, "0xaa02", int64(8), signerA},
		// Nonce 1 came in a later batch than nonce 2; nonce 3 is missing before 4.
		{"00000000-0000-4000-8000-000000000003", chain, 1, domain.StateTracking, 1, nil, nil, signerA},
		{"00000000-0000-4000-8000-000000000004", chain, 4, domain.StateAllocated, 1, nil, nil, signerA},
		// The same signer and nonce on another chain is another slot, and not read.
		{"00000000-0000-4000-8000-000000000005", otherChain, 0, domain.StateConfirmed, 0, "0xbb01", int64(1), signerA},
	}
	for _, tx := range txs {
		if _, err := db.Exec(ctx, `INSERT INTO managed_tx (tx_id, chain_id, signer, intent_hash, nonce, payload, tx_hash, state, block_number, fencing_token, created_at, confirmed_at)
			VALUES ($1, $2, $3, '\x00', $4, '{}', $5, $6::text, $7, 1, $8::timestamptz, CASE WHEN $6::text IN ('CONFIRMED', 'FAILED_FINAL') THEN $8::timestamptz END)`,
			tx.id, tx.chain, tx.signer, tx.nonce, tx.hash, string(tx.state), tx.block, batch.Add(time.Duration(tx.batch)*time.Second)); err != nil {
			t.Fatalf("insert %s: %v", tx.id, err)
		}
	}
	// The first tx's completion on this chain; the other chain's tx has its own.
	for _, c := range []struct {
		id    string
		chain int64
	}{{txs[0].id, chain}, {txs[4].id, otherChain}} {
		if _, err := db.Exec(ctx, `INSERT INTO tx_completions (tx_id, chain_id, signer, status) VALUES ($1, $2, $3, 'CONFIRMED')`, c.id, c.chain, signerA); err != nil {
			t.Fatal(err)
		}
	}
	// Two transactions signed at nonce 1 on this chain.
	for i, a := range []struct {
		hash, id string
		nonce    int64
		chain    int64
	}{{"0xc1", txs[2].id, 1, chain}, {"0xc2", txs[1].id, 1, chain}, {"0xc3", txs[4].id, 1, otherChain}} {
		if _, err := db.Exec(ctx, `INSERT INTO tx_attempt (tx_hash, tx_id, chain_id, signer, nonce, kind, max_fee_per_gas, max_priority_fee_per_gas, gas_limit, raw_tx, fencing_token)
			VALUES ($1, $2, $3, $4, $5, 'INITIAL', 1, 1, 21000, '\x00', 1)`, a.hash, a.id, a.chain, signerA, a.nonce); err != nil {
			t.Fatalf("attempt %d: %v", i, err)
		}
	}

	rec, err := readChainRecords(ctx, db, chain)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.txs) != 4 || len(rec.attempts) != 2 {
		t.Fatalf("read %d txs and %d attempts, want this chain's 4 and 2", len(rec.txs), len(rec.attempts))
	}
	byID := map[string]managedTx{}
	for _, tx := range rec.txs {
		byID[tx.id] = tx
	}
	first := byID[txs[0].id]
	if first.state != domain.StateConfirmed || first.nonce != 0 || first.txHash != "0xaa01" || first.block != 7 ||
		first.completions != 1 || first.signer != signerA || !first.createdAt.Equal(batch) {
		t.Errorf("confirmed tx read as %+v", first)
	}
	if open := byID[txs[2].id]; open.txHash != "" || open.block != 0 || open.completions != 0 || open.state != domain.StateTracking {
		t.Errorf("open tx read as %+v", open)
	}

	got := map[string]int{}
	for _, r := range recordRows([]string{txs[0].id, "00000000-0000-4000-8000-0000000000ff"}, rec) {
		got[r.name] = r.value
	}
	for name, want := range map[string]int{
		"acknowledged creates lost":                         1,
		"duplicate nonces (signer, nonce)":                  0,
		"nonce regressions (later allocation, lower nonce)": 1,
		"gaps in a signer's nonces":                         1,
		"nonces broadcast for two different txs":            1,
		"transactions not final":                            2,
		"transactions final":                                2,
		"final without a completion / completion twice":     1,
	} {
		if got[name] != want {
			t.Errorf("%s = %d, want %d", name, got[name], want)
		}
	}
}
