package repositories_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// A transaction is read by id or by its signer's request id; one that waits for a
// signature its signer's key source cannot give says so (shown, not stored: the first
// signature that succeeds ends it for all of them at once).
func TestTxRepositoryReads(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	txs := repositories.NewTxRepository(pool, testChain())
	signer := testsupport.SignerAddress(230)
	lease := acquireLease(t, pool, signer.Hex(), "node-a")
	waiting := insertTx(t, pool, txRow{signer: signer.Hex(), nonce: 0, state: "ALLOCATED", requestID: "order-1"})
	sent := insertTx(t, pool, txRow{signer: signer.Hex(), nonce: 1, state: "TRACKING", subState: "SIGNED", hash: "0x01", requestID: "order-2"})

	read := func(name string, get func() (domain.ManagedTx, error), wantID uuid.UUID, wantErr error, wantSubState domain.SubState) {
		t.Helper()
		tx, err := get()
		if !errors.Is(err, wantErr) || tx.ID != wantID || tx.SubState != wantSubState {
			t.Errorf("%s: %s sub-state %q (%v), want %s %q (%v)", name, tx.ID, tx.SubState, err, wantID, wantSubState, wantErr)
		}
	}
	byID := func(id uuid.UUID) func() (domain.ManagedTx, error) {
		return func() (domain.ManagedTx, error) { return txs.GetByID(t.Context(), id) }
	}
	byRequest := func(id string) func() (domain.ManagedTx, error) {
		return func() (domain.ManagedTx, error) { return txs.GetByRequestID(t.Context(), signer, id) }
	}
	read("by id", byID(waiting), waiting, nil, "")
	read("by request id", byRequest("order-2"), sent, nil, "SIGNED")
	read("an unknown id", byID(uuid.New()), uuid.UUID{}, domain.ErrNotFound, "")
	read("an unknown request id", byRequest("order-9"), uuid.UUID{}, domain.ErrNotFound, "")

	since := time.Now().Add(-time.Minute)
	if _, err := repositories.NewSigningRepository(pool, testChain()).RecordSigningHealth(t.Context(), lease, &since, "kms: key disabled"); err != nil {
		t.Fatal(err)
	}
	read("waiting while the key source fails", byID(waiting), waiting, nil, domain.SubStateSigningFailed)
	read("sent before the key source failed", byID(sent), sent, nil, "SIGNED")
	// It says since when and where operators look; the key source's own words name its
	// infrastructure, and anyone who may read the transaction reads this.
	if tx, _ := txs.GetByRequestID(t.Context(), signer, "order-1"); !strings.Contains(tx.LastError, since.UTC().Format(time.RFC3339)) ||
		!strings.Contains(tx.LastError, "signer's status") || strings.Contains(tx.LastError, "kms: key disabled") {
		t.Errorf("the waiting transaction's error %q: want since when and where operators look, without the key source's own error", tx.LastError)
	}
}

// Signing health is written by the signer's lease holder only (a node that lost the signer
// must not overwrite what the new owner found), and every node reads the conditions: the
// unsigned backlog, a failure with since when and why.
func TestSigningRepositoryRecordsUnderTheLease(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	signing := repositories.NewSigningRepository(pool, testChain())
	signer := testsupport.SignerAddress(231).Hex()
	lease := acquireLease(t, pool, signer, "node-a")
	insertTx(t, pool, txRow{signer: signer, nonce: 0, state: "ALLOCATED", age: time.Minute})
	insertTx(t, pool, txRow{signer: signer, nonce: 1, state: "ALLOCATED"})
	insertTx(t, pool, txRow{signer: signer, nonce: 2, state: "TRACKING", hash: "0x02"})

	if n, err := signing.UnsignedBacklog(t.Context(), signer); err != nil || n != 2 {
		t.Fatalf("unsigned backlog %d (%v), want 2", n, err)
	}
	since := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)
	stale := lease
	stale.Token++
	if _, err := signing.RecordSigningHealth(t.Context(), stale, &since, "from a node that lost it"); !errors.Is(err, domain.ErrFenced) {
		t.Fatalf("a record under a lease no longer held: %v, want FENCED", err)
	}
	if conditions, err := signing.SignerConditions(t.Context()); err != nil || len(conditions) != 0 {
		t.Fatalf("conditions after the fenced record: %+v (%v), want none recorded", conditions, err)
	}
	if wasFailing, err := signing.RecordSigningHealth(t.Context(), lease, &since, "kms: throttled"); err != nil || wasFailing {
		t.Fatalf("the first failure: was failing %v, %v; want not", wasFailing, err)
	}
	later := time.Now()
	if wasFailing, err := signing.RecordSigningHealth(t.Context(), lease, &later, "kms: key disabled"); err != nil || !wasFailing {
		t.Fatalf("the next failure: was failing %v, %v; want so", wasFailing, err)
	}
	conditions, err := signing.SignerConditions(t.Context())
	if err != nil || len(conditions) != 1 {
		t.Fatalf("conditions %+v (%v), want the failing signer", conditions, err)
	}
	c := conditions[0]
	if c.Signer != signer || c.SigningFailingSince == nil || !c.SigningFailingSince.Equal(since) || c.SigningError != "kms: key disabled" || c.Unsigned != 2 ||
		c.OldestUnsignedAgeSeconds < 59 {
		t.Fatalf("condition %+v, want failing since the first failure with the newest error, 2 unsigned, the oldest a minute", c)
	}
	if wasFailing, err := signing.RecordSigningHealth(t.Context(), lease, nil, ""); err != nil || !wasFailing {
		t.Fatalf("the end of the failure: was failing %v, %v; want so", wasFailing, err)
	}
	if wasFailing, err := signing.RecordSigningHealth(t.Context(), lease, nil, ""); err != nil || wasFailing {
		t.Fatalf("a success after it: was failing %v, %v; want not", wasFailing, err)
	}
	if conditions, err := signing.SignerConditions(t.Context()); err != nil || len(conditions) != 0 {
		t.Fatalf("conditions once it signs: %+v (%v), want the signer gone from the list (it is not on the roster)", conditions, err)
	}
}

// The signers whose open transactions need some node to drive them, with their lease
// holder, and the age of each one's oldest open transaction.
func TestOpenSignerRepository(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	open := repositories.NewOpenSignerRepository(pool, testChain())
	driven, orphan, done, quarantined := testsupport.SignerAddress(240).Hex(), testsupport.SignerAddress(241).Hex(), testsupport.SignerAddress(242).Hex(),
		testsupport.SignerAddress(243).Hex()
	acquireLease(t, pool, driven, "node-a")
	insertTx(t, pool, txRow{signer: driven, nonce: 0, state: "TRACKING", hash: "0x03", age: 2 * time.Minute})
	insertTx(t, pool, txRow{signer: orphan, nonce: 0, state: "ALLOCATED", age: time.Minute})
	insertTx(t, pool, txRow{signer: done, nonce: 0, state: "CONFIRMED", confirmed: true})
	// Several open rows of one signer, and final rows beside open ones, each signer still
	// listed once: the list skips from one signer's open rows to the next signer's.
	for nonce := 1; nonce <= 3; nonce++ {
		insertTx(t, pool, txRow{signer: driven, nonce: nonce, state: "ALLOCATED", age: time.Minute})
		insertTx(t, pool, txRow{signer: done, nonce: nonce, state: "CONFIRMED", confirmed: true})
	}
	insertTx(t, pool, txRow{signer: orphan, nonce: 1, state: "CONFIRMED", confirmed: true})
	qLease := acquireLease(t, pool, quarantined, "node-b")
	if ok, err := repositories.NewReconcileRepository(pool, testChain()).Quarantine(t.Context(), qLease, 0, 1); err != nil || !ok {
		t.Fatalf("quarantine: %t, %v", ok, err)
	}
	if _, err := pool.Exec(t.Context(), "UPDATE signer_lease SET expires_at = now() - interval '1 minute' WHERE signer = $1", quarantined); err != nil {
		t.Fatal(err)
	}

	signers, err := open.ListOpenSigners(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, s := range signers {
		got[s.Signer] = s.Owner
		if s.LeaseLive {
			got[s.Signer] += " live"
		}
	}
	want := map[string]string{driven: "node-a live", orphan: "", quarantined: "node-b"}
	if len(signers) != len(want) || len(got) != len(want) {
		t.Fatalf("open signers %v, want %v", got, want)
	}
	for s, w := range want {
		if got[s] != w {
			t.Fatalf("open signers %v, want %v", got, want)
		}
	}
	ages, err := open.OldestPendingAges(t.Context(), []string{driven, orphan, done})
	if err != nil || len(ages) != 2 || ages[driven] < 119 || ages[orphan] < 59 || ages[orphan] >= ages[driven] {
		t.Fatalf("oldest pending ages %v (%v), want about 120 s and 60 s, none for the signer with nothing open", ages, err)
	}
}

// A node renews, in one statement, the leases it still holds, each under its own token; a
// lease that expired or that another node took is missing from the answer.
func TestLeaseRepositoryRenew(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	leases := repositories.NewLeaseRepository(pool, testChain())
	held, expired, taken := testsupport.SignerAddress(250).Hex(), testsupport.SignerAddress(251).Hex(), testsupport.SignerAddress(252).Hex()
	first := acquireLease(t, pool, held, "node-a")
	acquireLease(t, pool, expired, "node-a")
	acquireLease(t, pool, taken, "node-a")
	if _, err := pool.Exec(t.Context(), "UPDATE signer_lease SET expires_at = now() - interval '1 minute' WHERE signer = $1", expired); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), "UPDATE signer_lease SET owner_node = 'node-b', fencing_token = fencing_token + 1 WHERE signer = $1", taken); err != nil {
		t.Fatal(err)
	}
	grants, err := leases.Renew(t.Context(), "node-a", []string{held, expired, taken}, time.Hour)
	if err != nil || len(grants) != 1 {
		t.Fatalf("renewed %+v (%v), want the one lease still held", grants, err)
	}
	g := grants[0]
	if g.Signer != held || g.Token != first.Token || g.Owner != "node-a" || !g.Acquired || g.ExpiresAt.Before(time.Now().Add(50*time.Minute)) {
		t.Fatalf("renewal %+v, want %s under token %d for about an hour", g, held, first.Token)
	}
}
