package repositories_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// txRow is a managed_tx row a test writes: signer's transaction at nonce in state.
type txRow struct {
	signer    string
	nonce     int
	state     string
	subState  string // "" for none
	hash      string // "" for none
	requestID string // "" for none
	confirmed bool
	age       time.Duration // how long ago it was created
	recovered bool
	unclaimed bool // recovered and adoptable for an hour
}

// insertTx writes r under token 1 and returns its id.
func insertTx(t *testing.T, pool *pgxpool.Pool, r txRow) uuid.UUID {
	t.Helper()
	id := uuid.New()
	null := func(s string) any {
		if s == "" {
			return nil
		}
		return s
	}
	var confirmedAt, recoveredAt, unclaimedUntil any
	if r.confirmed {
		confirmedAt = time.Now()
	}
	if r.recovered || r.unclaimed {
		recoveredAt = time.Now()
	}
	if r.unclaimed {
		unclaimedUntil = time.Now().Add(time.Hour)
	}
	if _, err := pool.Exec(t.Context(), `INSERT INTO managed_tx (chain_id, tx_id, signer, request_id, intent_hash, nonce, payload, state, sub_state, tx_hash,
		fencing_token, confirmed_at, created_at, recovered_at, unclaimed_until)
		VALUES (1337, $1, $2, $3, '\x00', $4, $5, $6, $7, $8, 1, $9, now() - make_interval(secs => $10), $11, $12)`,
		id, r.signer, null(r.requestID), r.nonce, fmt.Sprintf(`{"to":%q,"value":"%d","gasLimit":21000,"effectiveGasLimit":21000}`, r.signer, r.nonce+1),
		r.state, null(r.subState), null(r.hash), confirmedAt, r.age.Seconds(), recoveredAt, unclaimedUntil); err != nil {
		t.Fatal(err)
	}
	return id
}

// What an operator reads of a signer: its lease, cursor and waiting transactions, the
// stuck ones (of one signer or all), and a quarantine's unknown nonces by what recovery made
// of them, each recorded row with what the chain ran there.
func TestAdminRepositoryReads(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	admin := repositories.NewAdminRepository(pool, testChain())
	signer, other := testsupport.SignerAddress(220).Hex(), testsupport.SignerAddress(221).Hex()
	lease := acquireLease(t, pool, signer, "node-a")
	if _, err := pool.Exec(t.Context(), "INSERT INTO signer_nonce_cursor (chain_id, signer, next_nonce, fencing_token) VALUES (1337, $1, 2, $2)", signer, int64(lease.Token)); err != nil {
		t.Fatal(err)
	}
	insertTx(t, pool, txRow{signer: signer, nonce: 0, state: "STUCK", hash: "0x" + fmt.Sprintf("%064x", 1), age: time.Minute})
	insertTx(t, pool, txRow{signer: signer, nonce: 1, state: "ALLOCATED", age: 30 * time.Second})
	otherStuck := insertTx(t, pool, txRow{signer: other, nonce: 0, state: "STUCK"})

	status, err := admin.SignerStatus(t.Context(), signer)
	if err != nil {
		t.Fatal(err)
	}
	if status.LeaseOwner != "node-a" || status.FencingToken != lease.Token || !status.LeaseLive || status.NextNonce != 2 || status.PendingDepth != 2 ||
		status.StuckCount != 1 || status.Condition.Unsigned != 1 || status.OldestPendingAgeSeconds < 59 || status.Condition.Quarantined {
		t.Fatalf("status %+v, want node-a's lease, cursor 2, two pending (one stuck, one unsigned), oldest a minute", status)
	}
	if none, err := admin.SignerStatus(t.Context(), testsupport.SignerAddress(229).Hex()); err != nil || none.LeaseLive || none.PendingDepth != 0 {
		t.Fatalf("a signer never seen: %+v (%v), want an empty status", none, err)
	}

	stuckTests := []struct {
		name   string
		signer string
		limit  int
		want   int
	}{
		{"every signer", "", 10, 2},
		{"one signer", other, 10, 1},
		{"a page of one", "", 1, 1},
	}
	for _, tc := range stuckTests {
		got, err := admin.ListStuck(t.Context(), tc.signer, tc.limit)
		if err != nil || len(got) != tc.want {
			t.Errorf("stuck, %s: %d (%v), want %d", tc.name, len(got), err, tc.want)
		}
		if tc.signer == other && len(got) == 1 && got[0].ID != otherStuck {
			t.Errorf("stuck of %s: %s, want %s", other, got[0].ID, otherStuck)
		}
	}

	// A quarantine over nonces 2..6: recovery recorded 2 (unclaimed), 3 (adopted by a retry)
	// and 4 (its window over); 5 and 6 are not recorded.
	if ok, err := repositories.NewReconcileRepository(pool, testChain()).Quarantine(t.Context(), lease, 2, 7); err != nil || !ok {
		t.Fatalf("quarantine: %t, %v", ok, err)
	}
	hash := func(n int) string { return "0x" + fmt.Sprintf("%064x", 100+n) }
	insertTx(t, pool, txRow{signer: signer, nonce: 2, state: "TRACKING", hash: hash(2), unclaimed: true})
	insertTx(t, pool, txRow{signer: signer, nonce: 3, state: "TRACKING", hash: hash(3), recovered: true, requestID: "order-3"})
	insertTx(t, pool, txRow{signer: signer, nonce: 4, state: "CONFIRMED", hash: hash(4), recovered: true, confirmed: true})

	q, err := admin.GetQuarantine(t.Context(), signer)
	if err != nil || !q.Quarantined || q.DBNextNonce != 2 || q.ChainNonce != 7 || q.DetectedBy != "node-a" {
		t.Fatalf("quarantine %+v (%v), want live over 2..7 detected by node-a", q, err)
	}
	ranges, err := admin.QuarantineNonceRanges(t.Context(), signer)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fmt.Sprint(ranges), "[{UNCLAIMED 2 2 1} {ADOPTED 3 3 1} {EXPIRED 4 4 1} {NOT_RECORDED 5 6 2}]"; got != want {
		t.Fatalf("ranges %s, want %s", got, want)
	}
	recovered, err := admin.ListRecovered(t.Context(), signer, []uint64{2, 3, 4, 5})
	if err != nil || len(recovered) != 3 {
		t.Fatalf("recovered rows %+v (%v), want nonces 2, 3 and 4", recovered, err)
	}
	for nonce, want := range map[uint64]struct {
		requestID string
		unclaimed bool
	}{2: {"", true}, 3: {"order-3", false}, 4: {"", false}} {
		row := recovered[nonce]
		if row.RequestID != want.requestID || (row.UnclaimedUntil != nil) != want.unclaimed || row.Tx.Hash.Hex() != hash(int(nonce)) || row.Tx.Nonce != nonce ||
			row.Tx.Value.Int64() != int64(nonce+1) || row.Tx.Gas != 21000 {
			t.Errorf("recovered at %d: %+v, want request %q unclaimed %t", nonce, row, want.requestID, want.unclaimed)
		}
	}

	released, err := admin.RequestRelease(t.Context(), signer, "operator", "looked")
	if err != nil || !released {
		t.Fatalf("release: %t, %v", released, err)
	}
	if q, err := admin.GetQuarantine(t.Context(), signer); err != nil || q.ReleaseRequestedAt == nil || q.ReleaseRequestedBy != "operator" || !q.Quarantined {
		t.Fatalf("after the release request: %+v (%v), want requested by operator, still quarantined until recovery carries it out", q, err)
	}
	if again, err := admin.RequestRelease(t.Context(), other, "operator", ""); err != nil || again {
		t.Fatalf("releasing a signer never quarantined: %t, %v; want nothing to release", again, err)
	}
	if none, err := admin.GetQuarantine(t.Context(), other); err != nil || !none.DetectedAt.IsZero() {
		t.Fatalf("a signer never quarantined: %+v (%v)", none, err)
	}
}
