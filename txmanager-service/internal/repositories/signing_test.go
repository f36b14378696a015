package repositories_test

import (
	"math/big"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/submitting"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// The submitter reads an allocated intent's fields out of the payload in SQL; it reads the
// same intent as every other read, which decodes the payload as JSON.
func TestListAllocatedReadsTheIntentAsStored(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := t.Context()
	const signer = "0x00000000000000000000000000000000000000c1"
	payloads := []struct{ name, payload string }{
		{"a transfer", `{"to":"0x71C7656EC7ab88b098defB751B7401B5f6d8976F","value":"1000","gasLimit":21000,"effectiveGasLimit":21000}`},
		{"a contract creation", `{"value":"0","data":"0x6000","gasLimit":0,"effectiveGasLimit":53000}`},
		{"a call with its own fee caps", `{"to":"0x71c7656ec7ab88b098defb751b7401b5f6d8976f","value":"5","data":"0xabcdef","gasLimit":60000,` +
			`"effectiveGasLimit":60000,"maxFeePerGas":"30000000000","maxPriorityFeePerGas":"1500000000"}`},
		{"the largest value", `{"to":"0x0000000000000000000000000000000000000001","value":"` + new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), 256), big.NewInt(1)).String() +
			`","gasLimit":18446744073709551615,"effectiveGasLimit":18446744073709551615}`},
	}
	ids := make([]uuid.UUID, len(payloads))
	for i, p := range payloads {
		ids[i] = uuid.New()
		if _, err := pool.Exec(ctx, `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, fencing_token)
			VALUES (1337, $1, $2, '\x00', $3, $4, 'ALLOCATED', 1)`, ids[i], signer, i, p.payload); err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
	}
	listed, err := repositories.NewSubmittingRepository(pool, testChain()).ListAllocated(ctx, signer, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(listed) != len(payloads) {
		t.Fatalf("listed %d, want %d", len(listed), len(payloads))
	}
	reader := repositories.NewTxRepository(pool, testChain())
	for i, p := range payloads {
		t.Run(p.name, func(t *testing.T) {
			read, err := reader.GetByID(ctx, ids[i])
			if err != nil {
				t.Fatal(err)
			}
			got := listed[i]
			if got.ID != ids[i] || got.Nonce != uint64(i) || got.Signer != common.HexToAddress(signer) {
				t.Errorf("listed %s nonce %d signer %s, want %s nonce %d signer %s", got.ID, got.Nonce, got.Signer, ids[i], i, signer)
			}
			if !reflect.DeepEqual(got.Intent, read.Intent) || got.EffectiveGasLimit != read.EffectiveGasLimit {
				t.Errorf("listed intent %+v (effective gas %d), read %+v (effective gas %d)", got.Intent, got.EffectiveGasLimit, read.Intent, read.EffectiveGasLimit)
			}
			if got.Intent.Value == nil || got.EffectiveGasLimit == 0 {
				t.Errorf("listed intent lost its value or gas: %+v", got)
			}
		})
	}
	t.Run("an empty recipient is refused, not read as a contract creation", func(t *testing.T) {
		const malformed = "0x00000000000000000000000000000000000000c2"
		id := uuid.New()
		if _, err := pool.Exec(ctx, `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, fencing_token)
			VALUES (1337, $1, $2, '\x00', 0, '{"to":"","value":"1","gasLimit":21000,"effectiveGasLimit":21000}', 'ALLOCATED', 1)`, id, malformed); err != nil {
			t.Fatal(err)
		}
		if listed, err := repositories.NewSubmittingRepository(pool, testChain()).ListAllocated(ctx, malformed, 0, 10); err == nil {
			t.Errorf("listed %+v", listed)
		}
		if read, err := reader.GetByID(ctx, id); err == nil {
			t.Errorf("read %+v", read.Intent)
		}
	})
}

// The submitter lists a signer's ALLOCATED rows from the nonce it gives: from 0 every one,
// from above its signed ones only those above. Rows in other states, of another signer or
// final are never listed, and the limit keeps the lowest.
func TestListAllocatedReadsFromTheNonceGiven(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := t.Context()
	const signer, other = "0x00000000000000000000000000000000000000b1", "0x00000000000000000000000000000000000000b2"
	lease := acquireLease(t, pool, signer, "node-a")
	insert := func(signer string, nonce int, state string) {
		confirmed := "NULL"
		if state == "CONFIRMED" {
			confirmed = "now()"
		}
		if _, err := pool.Exec(ctx, `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, fencing_token, confirmed_at)
			VALUES (1337, $1, $2, '\x00', $3, '{"value":"0"}', $4, 1, `+confirmed+`)`, uuid.New(), signer, nonce, state); err != nil {
			t.Fatal(err)
		}
	}
	insert(signer, 0, "CONFIRMED")
	insert(signer, 1, "ALLOCATED") // a placeholder below signed rows
	insert(signer, 2, "TRACKING")
	insert(signer, 3, "STUCK")
	insert(signer, 4, "ALLOCATED")
	insert(signer, 5, "ALLOCATED")
	insert(other, 6, "ALLOCATED")
	if _, err := pool.Exec(ctx, "INSERT INTO signer_nonce_cursor (chain_id, signer, next_nonce, fencing_token) VALUES (1337, $1, 6, $2)", signer, int64(lease.Token)); err != nil {
		t.Fatal(err)
	}
	store := repositories.NewSubmittingRepository(pool, testChain())
	tests := []struct {
		from  uint64
		limit int
		want  []uint64
	}{
		{0, 10, []uint64{1, 4, 5}},
		{2, 10, []uint64{4, 5}},
		{5, 10, []uint64{5}},
		{6, 10, nil},
		{0, 2, []uint64{1, 4}},
	}
	for _, tt := range tests {
		txs, err := store.ListAllocated(ctx, signer, tt.from, tt.limit)
		if err != nil {
			t.Fatal(err)
		}
		var got []uint64
		for _, tx := range txs {
			got = append(got, tx.Nonce)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("from %d, limit %d: nonces %v, want %v", tt.from, tt.limit, got, tt.want)
		}
	}
	for signer, want := range map[string]uint64{signer: 6, other: 0} {
		if got, err := store.AllocationCursor(ctx, signer); err != nil || got != want {
			t.Errorf("cursor of %s = %d, %v; want %d", signer, got, err, want)
		}
	}
}

// Storing a signed attempt (ALLOCATED to TRACKING) touches no indexed column since
// migration 0014, so in a page with room it is a HOT update: no index entry written. The
// database refuses a row whose confirmed_at disagrees with its state, which the open-rows
// index relies on.
func TestSigningIsAHOTUpdate(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t, func(c *pgxpool.Config) { c.MaxConns = 1 })
	ctx := t.Context()
	checkIndexes(t, pool, map[string]bool{"managed_tx_open_nonce_idx": true, "managed_tx_mined_block_idx": true, "managed_tx_open_idx": false, "managed_tx_mined_idx": false})
	for _, bad := range []string{
		`INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, fencing_token) VALUES (1337, gen_random_uuid(), '0xbad', '\x00', 0, '{}', 'CONFIRMED', 1)`,
		`INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, fencing_token, confirmed_at) VALUES (1337, gen_random_uuid(), '0xbad', '\x00', 1, '{}', 'TRACKING', 1, now())`,
	} {
		if _, err := pool.Exec(ctx, bad); err == nil || !strings.Contains(err.Error(), "managed_tx_open_until_confirmed") {
			t.Errorf("%s: error %v, want the open-until-confirmed check", bad, err)
		}
	}

	const signer = "0x00000000000000000000000000000000000000b3"
	lease := acquireLease(t, pool, signer, "node-a")
	const rows = 5
	attempts := make([]pipeline.SignedAttempt, rows)
	for i := range attempts {
		id := uuid.New()
		if _, err := pool.Exec(ctx, `INSERT INTO managed_tx (chain_id, tx_id, signer, request_id, intent_hash, nonce, payload, state, fencing_token)
			VALUES (1337, $1, $2, $5, '\x00', $3, '{"to":"0x00000000000000000000000000000000000000ff","value":"1"}', 'ALLOCATED', $4)`,
			id, signer, i, int64(lease.Token), id.String()); err != nil {
			t.Fatal(err)
		}
		attempts[i] = pipeline.SignedAttempt{TxID: id, Hash: common.BigToHash(big.NewInt(int64(1000 + i))), Nonce: uint64(i), Kind: pipeline.AttemptOriginal,
			MaxFee: big.NewInt(2), MaxTip: big.NewInt(1), GasLimit: 21000, Raw: []byte{byte(i)}}
	}
	updated0, hot0 := managedTxUpdates(t, pool, 0)
	if signed, err := repositories.NewSubmittingRepository(pool, testChain()).MarkSigned(ctx, lease, attempts, time.Minute); err != nil || len(signed) != rows {
		t.Fatalf("MarkSigned = %v, %v; want the %d rows", signed, err, rows)
	}
	updated, hot := managedTxUpdates(t, pool, updated0+rows)
	if updated-updated0 != rows || hot-hot0 != rows {
		t.Fatalf("signing made %d updates of which %d HOT, want %d all HOT", updated-updated0, hot-hot0, rows)
	}
	var tracking int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM managed_tx WHERE signer = $1 AND state = 'TRACKING' AND sub_state = 'SIGNED' AND confirmed_at IS NULL", signer).Scan(&tracking); err != nil || tracking != rows {
		t.Fatalf("%d rows signed, %v; want %d", tracking, err, rows)
	}
}

// Attempts have no foreign key to their transaction (migration 0016), so the writes that
// store one must not store it for a row they do not move: a signed attempt for a row no
// longer ALLOCATED, a replacement or a resolution attempt for a row mined meanwhile. Those
// rows' ids are not answered, so their attempts are not sent either.
func TestAttemptsAreStoredOnlyForRowsTheWriteMoves(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := t.Context()
	const signer = "0x00000000000000000000000000000000000000b4"
	lease := acquireLease(t, pool, signer, "node-a")
	var fks int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_constraint WHERE contype = 'f' AND conrelid IN ('tx_attempt'::regclass, 'tx_completions'::regclass)`).Scan(&fks); err != nil || fks != 0 {
		t.Fatalf("%d foreign keys on tx_attempt and tx_completions (%v), want none", fks, err)
	}
	// Nonces 0-2 ALLOCATED; 3 signed by an earlier pass; 4 mined, 5 waiting for its receipt.
	states := []string{"ALLOCATED", "ALLOCATED", "ALLOCATED", "TRACKING", "TRACKING", "TRACKING"}
	ids := make([]uuid.UUID, len(states))
	for i, state := range states {
		ids[i] = uuid.New()
		receipt := "NULL"
		if i == 4 {
			receipt = `'{"status":"0x1"}'`
		}
		if _, err := pool.Exec(ctx, `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, tx_hash, receipt, fencing_token)
			VALUES (1337, $1, $2, '\x00', $3, '{"value":"1"}', $4, $5, `+receipt+`, $6)`,
			ids[i], signer, i, state, common.BigToHash(big.NewInt(int64(200+i))).Hex(), int64(lease.Token)); err != nil {
			t.Fatal(err)
		}
	}
	attempt := func(i int, hash int64) pipeline.SignedAttempt {
		return pipeline.SignedAttempt{TxID: ids[i], Hash: common.BigToHash(big.NewInt(hash)), Nonce: uint64(i), Kind: pipeline.AttemptOriginal,
			MaxFee: big.NewInt(2), MaxTip: big.NewInt(1), GasLimit: 21000, Raw: []byte{byte(i)}}
	}
	attemptsOf := func(i int) int {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM tx_attempt WHERE tx_id = $1", ids[i]).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	store := repositories.NewSubmittingRepository(pool, testChain())

	signed, err := store.MarkSigned(ctx, lease, []pipeline.SignedAttempt{attempt(0, 100), attempt(1, 101), attempt(3, 103)}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(signed, func(a, b uuid.UUID) int { return strings.Compare(a.String(), b.String()) })
	want := []uuid.UUID{ids[0], ids[1]}
	slices.SortFunc(want, func(a, b uuid.UUID) int { return strings.Compare(a.String(), b.String()) })
	if !slices.Equal(signed, want) {
		t.Errorf("MarkSigned answered %v, want the two ALLOCATED rows %v", signed, want)
	}
	if got := []int{attemptsOf(0), attemptsOf(1), attemptsOf(2), attemptsOf(3)}; !slices.Equal(got, []int{1, 1, 0, 0}) {
		t.Errorf("attempts of nonces 0-3 after signing 0, 1 and 3: %v, want [1 1 0 0]", got)
	}

	replaced, err := store.RecordReplacements(ctx, lease, []submitting.Replacement{
		{Replaced: common.BigToHash(big.NewInt(204)), Attempt: attempt(4, 404)}, // mined: not replaced
	})
	if err != nil || len(replaced) != 0 || attemptsOf(4) != 0 {
		t.Errorf("replacement of a mined row: answered %v, %v, %d attempts; want none stored", replaced, err, attemptsOf(4))
	}

	attempts := repositories.NewAttemptRepository(pool, testChain())
	for _, tc := range []struct {
		nonce    int
		want     bool
		attempts int
	}{{nonce: 4, want: false, attempts: 0}, {nonce: 5, want: true, attempts: 1}} {
		recorded, err := attempts.RecordAttempt(ctx, lease, attempt(tc.nonce, 300+int64(tc.nonce)), "CANCEL_SUBMITTED", time.Minute)
		if err != nil || recorded != tc.want || attemptsOf(tc.nonce) != tc.attempts {
			t.Errorf("RecordAttempt for nonce %d = %v, %v with %d attempts; want %v with %d", tc.nonce, recorded, err, attemptsOf(tc.nonce), tc.want, tc.attempts)
		}
	}
}

// A resolution's attempt is priced against the transaction's current attempt when the
// stuck stage read it; resubmission may store a re-pricing meanwhile, which outbids it. It
// is stored only while the attempt it replaces is still the current one, so a cancellation
// priced below the re-pricing is neither stored nor sent.
func TestAResolutionIsStoredOnlyOverTheAttemptItWasPricedAgainst(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := t.Context()
	const signer = "0x00000000000000000000000000000000000000b8"
	lease := acquireLease(t, pool, signer, "node-a")
	hash := func(n int64) common.Hash { return common.BigToHash(big.NewInt(n)) }
	id := uuid.New()
	if _, err := pool.Exec(ctx, `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, tx_hash, fencing_token)
		VALUES (1337, $1, $2, '\x00', 0, '{"value":"1"}', 'TRACKING', $3, $4)`, id, signer, hash(500).Hex(), int64(lease.Token)); err != nil {
		t.Fatal(err)
	}
	attempt := func(n int64) pipeline.SignedAttempt {
		return pipeline.SignedAttempt{TxID: id, Hash: hash(n), Nonce: 0, Kind: pipeline.AttemptCancel, MaxFee: big.NewInt(2), MaxTip: big.NewInt(1), GasLimit: 21000, Raw: []byte{1}}
	}
	store := repositories.NewSubmittingRepository(pool, testChain())
	attempts := repositories.NewAttemptRepository(pool, testChain())
	// Resubmission re-prices 500 as 501 first.
	if stored, err := store.RecordReplacements(ctx, lease, []submitting.Replacement{{Replaced: hash(500), Attempt: pipeline.SignedAttempt{
		TxID: id, Hash: hash(501), Kind: pipeline.AttemptReplace, MaxFee: big.NewInt(3), MaxTip: big.NewInt(1), GasLimit: 21000, Raw: []byte{2}}}}); err != nil || len(stored) != 1 {
		t.Fatalf("RecordReplacements = %v, %v", stored, err)
	}
	none := (*common.Hash)(nil)
	for _, tc := range []struct {
		name     string
		replaced *common.Hash
		attempt  int64
		want     bool
		current  common.Hash
	}{
		{"priced against the attempt re-priced meanwhile", &[]common.Hash{hash(500)}[0], 600, false, hash(501)},
		{"priced against no attempt, where one is signed", none, 601, false, hash(501)},
		{"priced against the current attempt", &[]common.Hash{hash(501)}[0], 602, true, hash(602)},
	} {
		recorded, err := attempts.RecordResolution(ctx, lease, attempt(tc.attempt), tc.replaced, "CANCEL_SUBMITTED", time.Minute)
		var current string
		if qErr := pool.QueryRow(ctx, "SELECT tx_hash FROM managed_tx WHERE tx_id = $1", id).Scan(&current); qErr != nil {
			t.Fatal(qErr)
		}
		var stored int
		if qErr := pool.QueryRow(ctx, "SELECT count(*) FROM tx_attempt WHERE tx_hash = $1", hash(tc.attempt).Hex()).Scan(&stored); qErr != nil {
			t.Fatal(qErr)
		}
		if err != nil || recorded != tc.want || current != tc.current.Hex() || (stored == 1) != tc.want {
			t.Errorf("%s: recorded %v (%v), current %s, attempt stored %d; want recorded %v, current %s", tc.name, recorded, err, current, stored, tc.want, tc.current.Hex())
		}
	}
}

// NextResubmitIn answers for the signer's broadcast, unmined rows only: a mined row due long
// ago, a final one and another signer's do not count.
func TestNextResubmitInCountsUnminedRowsOnly(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := t.Context()
	const signer, other, idle = "0x00000000000000000000000000000000000000b5", "0x00000000000000000000000000000000000000b6", "0x00000000000000000000000000000000000000b7"
	lease := acquireLease(t, pool, signer, "node-a")
	for i, row := range []struct {
		signer, state, due string
		receipt, confirmed bool
	}{
		{signer, "TRACKING", "30 seconds", false, false},
		{signer, "STUCK", "20 seconds", false, false},
		{signer, "TRACKING", "-1 hour", true, false},   // mined
		{signer, "CONFIRMED", "-1 hour", true, true},   // final
		{other, "TRACKING", "5 seconds", false, false}, // another signer
	} {
		if _, err := pool.Exec(ctx, `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, tx_hash, next_resubmit_at, receipt, confirmed_at, fencing_token)
			VALUES (1337, gen_random_uuid(), $1, '\x00', $2, '{"value":"1"}', $3, $4, now() + $5::interval,
				CASE WHEN $6 THEN '{"status":"0x1"}'::jsonb END, CASE WHEN $7 THEN now() END, $8)`,
			row.signer, i, row.state, common.BigToHash(big.NewInt(int64(500+i))).Hex(), row.due, row.receipt, row.confirmed, int64(lease.Token)); err != nil {
			t.Fatal(err)
		}
	}
	store := repositories.NewSubmittingRepository(pool, testChain())
	in, pending, err := store.NextResubmitIn(ctx, signer)
	if err != nil || !pending || in <= 15*time.Second || in > 20*time.Second {
		t.Errorf("NextResubmitIn(signer) = %v, %v, %v; want about 20s, pending", in, pending, err)
	}
	if in, pending, err := store.NextResubmitIn(ctx, idle); err != nil || pending {
		t.Errorf("NextResubmitIn(a signer without rows) = %v, %v, %v; want none pending", in, pending, err)
	}
}
