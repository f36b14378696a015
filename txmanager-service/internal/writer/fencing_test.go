package writer_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/test/testsupport"

	"github.com/bionicotaku/txmanager-service/internal/writer"
)

// TestTakeoverBetweenLeaseCheckAndWritesFencesTheOldOwner is the interleaving fencing
// exists for (docs/design.md#lease-and-fencing): node A has passed its lease check, node B takes the signer over, and only
// then do A's writes run. Every one of them must be rejected, B must continue from the
// right nonce, and no row may carry A's token after B's first write.
func TestTakeoverBetweenLeaseCheckAndWritesFencesTheOldOwner(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := context.Background()
	signer := testsupport.SignerAddress(1)
	nodeA := testsupport.NewWriterNode(t, pool, "node-a", testsupport.WriterNodeOptions{})
	nodeB := testsupport.NewWriterNode(t, pool, "node-b", testsupport.WriterNodeOptions{})

	// A owns the signer and allocates 0..2 with token 1.
	if _, errs := testsupport.Results(t, nodeA.Allocate(t, signer, 3)); errors.Join(errs...) != nil {
		t.Fatalf("A's first batch: %v", errors.Join(errs...))
	}
	leaseA, ok := nodeA.Leases.Current(signer.Hex())
	if !ok || leaseA.Token != 1 {
		t.Fatalf("A's lease = %+v, held=%v; want token 1", leaseA, ok)
	}

	// A's next batch passes its lease check, then stops before its first statement.
	gate := testsupport.NewGate()
	nodeA.Store.SetGates(gate, nil)
	opsA := make(chan []*writer.Op, 1)
	go func() { opsA <- nodeA.Allocate(t, signer, 2) }()
	<-gate.Reached

	// Meanwhile A's lease lapses and B takes over (token 2) and writes first.
	if _, err := pool.Exec(ctx, "UPDATE signer_lease SET expires_at = now() - interval '1 hour' WHERE signer = $1", signer.Hex()); err != nil {
		t.Fatal(err)
	}
	txsB, errs := testsupport.Results(t, nodeB.Allocate(t, signer, 2))
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("B's batch: %v", err)
	}
	leaseB, _ := nodeB.Leases.Current(signer.Hex())
	if leaseB.Token != 2 || txsB[0].Nonce != 3 || txsB[1].Nonce != 4 {
		t.Fatalf("B: token %d nonces %d,%d; want token 2 continuing at 3,4", leaseB.Token, txsB[0].Nonce, txsB[1].Nonce)
	}

	// A resumes: its batch is fenced and it drops the lease.
	close(gate.Release)
	_, errsA := testsupport.Results(t, <-opsA)
	for _, err := range errsA {
		var fenced *domain.FencedError
		if !errors.As(err, &fenced) || fenced.Token != 1 {
			t.Fatalf("A's op err = %v, want FENCED with token 1", err)
		}
	}
	if _, held := nodeA.Leases.Current(signer.Hex()); held {
		t.Fatal("A still trusts its lease after being fenced")
	}

	// Every other critical write of A, attempted directly with its stale lease, is fenced too.
	store := nodeA.Store.AllocationStore // the repository itself, without the test's gates
	stale := domain.ManagedTx{ID: txsB[0].ID, Signer: signer, Nonce: 99, Intent: txsB[0].Intent, State: domain.StateAllocated}
	stale.ID[15] ^= 0xff
	writes := map[string]func(context.Context, txmanager.Session) error{
		"lease check": func(ctx context.Context, s txmanager.Session) error {
			_, err := store.LockLeaseAndReadCursor(ctx, s, leaseA, nil)
			return err
		},
		"allocation (insert + cursor)": func(ctx context.Context, s txmanager.Session) error {
			return store.WriteAllocation(ctx, s, leaseA, []domain.ManagedTx{stale}, 100)
		},
	}
	for name, write := range writes {
		err := nodeA.TxManager.WithinTx(ctx, txmanager.DefaultOptions(), write)
		if !errors.Is(err, domain.ErrFenced) {
			t.Errorf("A's %s with token 1 after takeover: err = %v, want FENCED", name, err)
		}
	}

	testsupport.AssertSignerRows(t, pool, signer.Hex(), []testsupport.RowWant{{Nonce: 0, Token: 1}, {Nonce: 1, Token: 1}, {Nonce: 2, Token: 1}, {Nonce: 3, Token: 2}, {Nonce: 4, Token: 2}}, 5)
}

// TestTakeoverWaitsForTheOwnersOpenBatch covers the other interleaving: A's batch already
// holds the lease row FOR KEY SHARE when A's lease expires on the clock. B's takeover must wait
// for A's commit, so A's writes land before B's and B continues after them.
func TestTakeoverWaitsForTheOwnersOpenBatch(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	signer := testsupport.SignerAddress(2)
	short := testsupport.WriterNodeOptions{LeaseDuration: 1500 * time.Millisecond, Skew: 50 * time.Millisecond}
	nodeA := testsupport.NewWriterNode(t, pool, "node-a", short)
	nodeB := testsupport.NewWriterNode(t, pool, "node-b", short)

	gate := testsupport.NewGate()
	nodeA.Store.SetGates(nil, gate)
	opsA := make(chan []*writer.Op, 1)
	go func() { opsA <- nodeA.Allocate(t, signer, 3) }()
	<-gate.Reached // A holds the lease row FOR KEY SHARE inside its open transaction

	time.Sleep(1700 * time.Millisecond) // A's lease is now expired by the database clock
	acquired := make(chan error, 1)
	go func() {
		_, err := nodeB.Leases.Acquire(context.Background(), signer.Hex())
		acquired <- err
	}()
	select {
	case err := <-acquired:
		t.Fatalf("B took the lease over while A's batch held it (err=%v)", err)
	case <-time.After(500 * time.Millisecond):
	}

	close(gate.Release)
	txsA, errsA := testsupport.Results(t, <-opsA)
	if err := errors.Join(errsA...); err != nil {
		t.Fatalf("A's batch, ordered before the takeover, failed: %v", err)
	}
	if err := <-acquired; err != nil {
		t.Fatalf("B's takeover after A's commit: %v", err)
	}
	txsB, errsB := testsupport.Results(t, nodeB.Allocate(t, signer, 2))
	if err := errors.Join(errsB...); err != nil {
		t.Fatalf("B's batch: %v", err)
	}
	if txsA[2].Nonce != 2 || txsB[0].Nonce != 3 {
		t.Fatalf("A ended at %d, B started at %d; want 2 then 3", txsA[2].Nonce, txsB[0].Nonce)
	}
	testsupport.AssertSignerRows(t, pool, signer.Hex(), []testsupport.RowWant{{Nonce: 0, Token: 1}, {Nonce: 1, Token: 1}, {Nonce: 2, Token: 1}, {Nonce: 3, Token: 2}, {Nonce: 4, Token: 2}}, 5)
}

// TestRenewalDoesNotWaitForTheOwnersOpenBatch: the owner's writers hold the lease row FOR
// KEY SHARE; its renewal changes expires_at only and must not queue behind them (under a
// steady stream of writers a row held FOR SHARE is never free: the renewal timed out and a
// busy owner lost its lease). The takeover still waits: see the test above.
func TestRenewalDoesNotWaitForTheOwnersOpenBatch(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	signer := testsupport.SignerAddress(3)
	nodeA := testsupport.NewWriterNode(t, pool, "node-a", testsupport.WriterNodeOptions{LeaseDuration: 10 * time.Second})

	gate := testsupport.NewGate()
	nodeA.Store.SetGates(nil, gate)
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(gate.Release) }) }
	// A failed check must still let A's batch finish, or the pool's cleanup waits forever.
	t.Cleanup(release)
	opsA := make(chan []*writer.Op, 1)
	go func() { opsA <- nodeA.Allocate(t, signer, 2) }()
	<-gate.Reached // A's batch holds the lease row inside its open transaction
	before, ok := nodeA.Leases.Current(signer.Hex())
	if !ok {
		t.Fatal("A holds no lease for the signer")
	}

	time.Sleep(50 * time.Millisecond) // the database clock moves on, so a renewal shows
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	nodeA.Leases.Tick(ctx)
	after, ok := nodeA.Leases.Current(signer.Hex())
	if !ok || !after.ExpiresAt.After(before.ExpiresAt) || after.Token != before.Token {
		t.Fatalf("renewal while A's batch is open: lease %+v (held %v), before %+v; want the same token with a later expiry", after, ok, before)
	}

	release()
	if _, errs := testsupport.Results(t, <-opsA); errors.Join(errs...) != nil {
		t.Fatalf("A's batch after its renewal: %v", errors.Join(errs...))
	}
}
