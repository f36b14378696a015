package repositories_test

import (
	"fmt"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/reconcile"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// A recovery's progress is kept with the rows it records, in the quarantine row: the next
// step starts where the last one ended; an operator's release is a request the recovery
// carries out (released in their name); a new quarantine after a release starts afresh. A
// signer that was never quarantined reads as such (every reconciliation pass reads it).
func TestRecoveryProgressIsKeptWithTheRowsItRecords(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := t.Context()
	const signer = "0x00000000000000000000000000000000000000d1"
	lease := acquireLease(t, pool, signer, "node-a")
	store := repositories.NewReconcileRepository(pool, testChain())
	admin := repositories.NewAdminRepository(pool, testChain())

	check, err := store.SignerChainCheck(ctx, signer)
	if err != nil || check.Quarantine != nil || check.NextNonce != -1 {
		t.Fatalf("a signer never quarantined: %+v, %v; want no quarantine, no cursor", check, err)
	}
	if quarantined, err := store.Quarantine(ctx, lease, 10, 20); err != nil || !quarantined {
		t.Fatalf("quarantine: %v, %v", quarantined, err)
	}
	check, err = store.SignerChainCheck(ctx, signer)
	if err != nil || check.Quarantine == nil {
		t.Fatalf("quarantined signer: %+v, %v", check, err)
	}
	if q := check.Quarantine; q.From != 10 || q.To != 20 || q.RecordedTo != 10 || q.ScanFrom != nil || q.Recorded != 0 || q.ReleaseRequested || q.DetectedAt.IsZero() {
		t.Fatalf("a new quarantine's recovery: %+v, want nothing recorded from nonce 10, no scan start yet", q)
	}

	// A step records nonces 10..12 and says the next scan starts at block 55.
	var rows []reconcile.RecoveredTx
	to := common.HexToAddress("0x00000000000000000000000000000000000000e1")
	for nonce := uint64(10); nonce < 13; nonce++ {
		id := uuid.Must(uuid.NewV7())
		intent := domain.Intent{To: &to, ToHex: to.Hex(), Value: big.NewInt(int64(nonce)), GasLimit: 21000}
		hash := common.BigToHash(big.NewInt(int64(nonce)))
		rows = append(rows, reconcile.RecoveredTx{
			Tx: domain.ManagedTx{ID: id, Signer: common.HexToAddress(signer), SignerHex: signer, Nonce: nonce, Intent: intent, EffectiveGasLimit: 21000,
				Fingerprint: domain.CreateRequest{Signer: common.HexToAddress(signer), Intent: intent}.Fingerprint(), State: domain.StateTracking, TxHash: &hash},
			Attempt: pipeline.SignedAttempt{TxID: id, Hash: hash, Nonce: nonce, Kind: pipeline.AttemptOriginal, MaxFee: big.NewInt(1), MaxTip: big.NewInt(1), GasLimit: 21000, Raw: []byte{1}},
		})
	}
	block := uint64(55)
	recorded, err := store.RecordRecovered(ctx, lease, rows, time.Now().Add(time.Hour), time.Minute, reconcile.RecoveryProgress{RecordedTo: 13, ScanFrom: &block})
	if err != nil || recorded != 3 {
		t.Fatalf("record: %d, %v; want 3", recorded, err)
	}
	// Recorded again (a step that repeats): nothing twice, and the progress never goes back.
	recorded, err = store.RecordRecovered(ctx, lease, rows[:1], time.Now().Add(time.Hour), time.Minute, reconcile.RecoveryProgress{RecordedTo: 11, ScanFrom: &block})
	if err != nil || recorded != 0 {
		t.Fatalf("record again: %d, %v; want 0", recorded, err)
	}
	check, err = store.SignerChainCheck(ctx, signer)
	if err != nil || check.Quarantine.RecordedTo != 13 || check.Quarantine.ScanFrom == nil || *check.Quarantine.ScanFrom != 55 || check.Quarantine.Recorded != 3 {
		t.Fatalf("after a step: %+v, %v; want recorded through 12, the scan from block 55, 3 rows", check.Quarantine, err)
	}
	anchors, err := store.RecoveryAnchors(ctx, signer, 12, 16)
	if err != nil || len(anchors) != 2 || anchors[0].Nonce != 11 || anchors[1].Nonce != 10 {
		t.Fatalf("anchors below nonce 12: %+v, %v; want nonces 11 and 10, newest first", anchors, err)
	}

	// An operator releases it: a request until the recovery finishes, in their name.
	if requested, err := admin.RequestRelease(ctx, signer, "operator-1", "ours"); err != nil || !requested {
		t.Fatalf("release request: %v, %v", requested, err)
	}
	if check, err = store.SignerChainCheck(ctx, signer); err != nil || check.Quarantine == nil || !check.Quarantine.ReleaseRequested {
		t.Fatalf("after the request: %+v, %v; want still quarantined, release requested", check.Quarantine, err)
	}
	if released, err := store.FinishRecovery(ctx, lease, 20, "recorded 3"); err != nil || !released {
		t.Fatalf("finish: %v, %v", released, err)
	}
	q, err := admin.GetQuarantine(ctx, signer)
	if err != nil || q.Quarantined || q.ReleasedBy != "operator-1" || q.ReleaseNote != "ours; recorded 3" || q.Recorded != 3 {
		t.Fatalf("released quarantine: %+v, %v; want released by operator-1 with both notes", q, err)
	}
	if requested, err := admin.RequestRelease(ctx, signer, "operator-1", "again"); err != nil || requested {
		t.Fatalf("releasing a released signer: %v, %v; want nothing to release", requested, err)
	}
	var cursor int64
	if err := pool.QueryRow(ctx, `SELECT next_nonce FROM signer_nonce_cursor WHERE signer = $1`, signer).Scan(&cursor); err != nil || cursor != 20 {
		t.Fatalf("cursor after the recovery: %d, %v; want past the chain's nonce, 20", cursor, err)
	}

	// The chain moves past what was released: a new quarantine starts its recovery afresh.
	if quarantined, err := store.Quarantine(ctx, lease, 20, 25); err != nil || !quarantined {
		t.Fatalf("second quarantine: %v, %v", quarantined, err)
	}
	check, err = store.SignerChainCheck(ctx, signer)
	if err != nil || check.Quarantine == nil || check.Quarantine.RecordedTo != 20 || check.Quarantine.ScanFrom != nil || check.Quarantine.Recorded != 0 || check.Quarantine.ReleaseRequested {
		t.Fatalf("second quarantine's recovery: %+v, %v; want afresh from nonce 20", check.Quarantine, err)
	}
}

// A recovered row still adoptable whose nonce another transaction took is final at once, but
// its completion waits for its adoption (naming the request) or the end of its window, as
// finality holds it back: emitted now, it would name no request and an adopter's would be
// lost to the one already written.
func TestANonceTakenFromAnAdoptableRowHoldsItsCompletion(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := t.Context()
	const signer = "0x00000000000000000000000000000000000000d2"
	lease := acquireLease(t, pool, signer, "node-a")
	store := repositories.NewReconcileRepository(pool, testChain())
	steps := []struct {
		name            string
		unclaimedUntil  string // SQL: when the adoption window ends (NULL: not adoptable)
		wantCompletions int
	}{
		{"adoptable for an hour", "now() + interval '1 hour'", 0},
		{"not adoptable", "NULL", 1},
	}
	for i, s := range steps {
		id := uuid.New()
		if _, err := pool.Exec(ctx, `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, sub_state, fencing_token, recovered_at, unclaimed_until)
			VALUES (1337, $1, $2, '\x00', $3, '{"value":"0"}', 'TRACKING', 'NONCE_TAKEN', $4, now(), `+s.unclaimedUntil+`)`, id, signer, i, int64(lease.Token)); err != nil {
			t.Fatal(err)
		}
		if err := store.FailNonceTaken(ctx, lease, domain.ManagedTx{ID: id}, "taken"); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		var state string
		var completions int
		if err := pool.QueryRow(ctx, `SELECT (SELECT state FROM managed_tx WHERE tx_id = $1), (SELECT count(*) FROM tx_completions WHERE tx_id = $1)`, id).
			Scan(&state, &completions); err != nil {
			t.Fatal(err)
		}
		if state != "FAILED_FINAL" || completions != s.wantCompletions {
			t.Fatalf("%s: %s with %d completions, want FAILED_FINAL with %d", s.name, state, completions, s.wantCompletions)
		}
	}
}

// The adoption windows of a large loss end a bounded number of rows a call, lowest nonces
// first, until none is left: one statement never updates (and writes completions for) the
// whole loss at once.
func TestAdoptionWindowsEndInBoundedSteps(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := t.Context()
	const signer = "0x00000000000000000000000000000000000000d3"
	lease := acquireLease(t, pool, signer, "node-a")
	store := repositories.NewReconcileRepository(pool, testChain())
	if _, err := pool.Exec(ctx, `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, fencing_token, recovered_at, unclaimed_until, confirmed_at)
		SELECT 1337, gen_random_uuid(), $1, '\x00', g, '{"value":"0"}', 'CONFIRMED', $2, now(), now() - interval '1 minute', now()
		FROM generate_series(0, 1000) g`, signer, int64(lease.Token)); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{1000, 1, 0} {
		n, err := store.ExpireUnclaimed(ctx, lease)
		if err != nil || n != want {
			t.Fatalf("call %d ended %d windows (%v), want %d", i, n, err, want)
		}
	}
	var completions int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM tx_completions WHERE signer = $1", signer).Scan(&completions); err != nil || completions != 1001 {
		t.Fatalf("%d completions (%v), want one for each of the 1,001 rows", completions, err)
	}
}

// A quarantine's summary is read from the rows recorded, the gaps between them being the
// nonces not recorded: a range of millions of nonces is summarised at once, with leading,
// inner and trailing gaps, and a range with nothing recorded is one gap.
func TestAQuarantineOfMillionsOfNoncesIsSummarisedFromItsRows(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := t.Context()
	admin := repositories.NewAdminRepository(pool, testChain())
	store := repositories.NewReconcileRepository(pool, testChain())
	const signer, empty = "0x00000000000000000000000000000000000000d4", "0x00000000000000000000000000000000000000d5"
	for _, s := range []string{signer, empty} {
		if quarantined, err := store.Quarantine(ctx, acquireLease(t, pool, s, "node-a"), 10, 5_000_010); err != nil || !quarantined {
			t.Fatalf("quarantine %s: %v, %v", s, quarantined, err)
		}
	}
	for _, row := range []struct {
		nonce     int
		requestID string
		adoptable bool
	}{{10, "", true}, {11, "order-1", false}, {12, "order-2", false}, {20, "", false}, {5_000_009, "", true}} {
		if _, err := pool.Exec(ctx, `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, fencing_token, recovered_at, request_id, unclaimed_until)
			VALUES (1337, gen_random_uuid(), $1, '\x00', $2, '{"value":"0"}', 'TRACKING', 1, now(), NULLIF($3, ''), CASE WHEN $4 THEN now() + interval '1 hour' END)`,
			signer, row.nonce, row.requestID, row.adoptable); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		signer string
		want   string
	}{
		{signer, "[{UNCLAIMED 10 10 1} {ADOPTED 11 12 2} {NOT_RECORDED 13 19 7} {EXPIRED 20 20 1} {NOT_RECORDED 21 5000008 4999988} {UNCLAIMED 5000009 5000009 1}]"},
		{empty, "[{NOT_RECORDED 10 5000009 5000000}]"},
	}
	for _, tt := range tests {
		ranges, err := admin.QuarantineNonceRanges(ctx, tt.signer)
		if err != nil || fmt.Sprint(ranges) != tt.want {
			t.Fatalf("ranges of %s: %v (%v), want %s", tt.signer, ranges, err, tt.want)
		}
	}
}
