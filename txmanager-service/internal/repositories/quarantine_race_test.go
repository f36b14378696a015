package repositories_test

import (
	"context"
	"testing"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/repositories/sqlcdb"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// The allocator and the reconciler can find the chain ahead of the database at the same
// moment and both record the quarantine. The one that waits for the other's insert must
// still answer "quarantined": answering from a read with the snapshot from before the other
// committed, it said "not quarantined", and the signer was served above nonces the database
// does not know (a create answered at nonce 5 where it had to be refused, seen once in CI).
// Then, as before: a check of a signer already quarantined answers quarantined; one of a
// signer whose quarantine an operator released answers not, unless the chain moved past it.
func TestConcurrentQuarantineChecksBothAnswerQuarantined(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := t.Context()
	const signer = "0x00000000000000000000000000000000000000c1"
	lease := acquireLease(t, pool, signer, "node-a")
	store := repositories.NewReconcileRepository(pool, testChain())

	first, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = first.Rollback(context.WithoutCancel(ctx)) }()
	row, err := sqlcdb.New(first).QuarantineSigner(ctx, sqlcdb.QuarantineSignerParams{ChainID: 1337, Signer: signer, NodeID: lease.Owner,
		FencingToken: int64(lease.Token), DbNextNonce: 3, ChainNonce: 5})
	if err != nil || !row.LeaseHeld || !row.Quarantined {
		t.Fatalf("first check: %+v, %v; want quarantined", row, err)
	}
	type answer struct {
		quarantined bool
		err         error
	}
	second := make(chan answer, 1)
	go func() {
		quarantined, err := store.Quarantine(ctx, lease, 3, 5)
		second <- answer{quarantined, err}
	}()
	// The second check waits on the first's uncommitted row.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%QuarantineSigner%'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the second check never waited for the first")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := <-second; got.err != nil || !got.quarantined {
		t.Fatalf("second, concurrent check: quarantined %v, %v; want quarantined", got.quarantined, got.err)
	}

	for _, tc := range []struct {
		name       string
		release    bool
		chainNonce uint64
		want       bool
	}{
		{name: "already quarantined", chainNonce: 5, want: true},
		{name: "released, chain where it was", release: true, chainNonce: 5, want: false},
		{name: "released, chain moved past it", release: true, chainNonce: 7, want: true},
	} {
		if tc.release {
			if _, err := pool.Exec(ctx, `UPDATE signer_quarantine SET released_at = now(), released_by = 'operator' WHERE signer = $1`, signer); err != nil {
				t.Fatal(err)
			}
		}
		quarantined, err := store.Quarantine(ctx, lease, 3, tc.chainNonce)
		if err != nil || quarantined != tc.want {
			t.Errorf("%s: quarantined %v, %v; want %v", tc.name, quarantined, err, tc.want)
		}
	}
	var chainNonce int64
	if err := pool.QueryRow(ctx, `SELECT chain_nonce FROM signer_quarantine WHERE signer = $1 AND released_at IS NULL`, signer).Scan(&chainNonce); err != nil || chainNonce != 7 {
		t.Errorf("quarantine on record: chain nonce %d, %v; want the one recorded last, 7", chainNonce, err)
	}
}
