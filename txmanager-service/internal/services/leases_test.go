package services_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// offsetClock is the wall clock moved by the test: a lease's local deadline passes at once.
type offsetClock struct{ offset atomic.Int64 }

func (c *offsetClock) Now() time.Time { return time.Now().Add(time.Duration(c.offset.Load())) }

// leaseNode is one node's lease manager on a real database, with what its lost hooks saw.
type leaseNode struct {
	pool   *pgxpool.Pool
	leases *services.LeaseManager
	clock  *offsetClock
	mu     sync.Mutex
	lost   []string
}

func newLeaseNode(t *testing.T, pool *pgxpool.Pool, node string, idle time.Duration) *leaseNode {
	t.Helper()
	n := &leaseNode{pool: pool, clock: &offsetClock{}}
	n.leases = services.NewLeaseManager(services.LeaseConfig{Node: node, Duration: 10 * time.Second, RenewInterval: 3 * time.Second, Skew: time.Second,
		IdleTimeout: idle, NotLeaderRetryAfter: time.Second}, repositories.NewLeaseRepository(pool, testsupport.TestChain()), n.clock, telemetry.Noop(), testLogger())
	n.leases.OnLost(func(signer string) {
		n.mu.Lock()
		defer n.mu.Unlock()
		n.lost = append(n.lost, signer)
	})
	return n
}

func (n *leaseNode) lostSigners() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Clone(n.lost)
}

func (n *leaseNode) resetLost() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.lost = nil
}

// dbLease is the signer's lease row: owner, token, and whether it is live.
func dbLease(t *testing.T, pool *pgxpool.Pool, signer string) (owner string, token int64, live bool) {
	t.Helper()
	if err := pool.QueryRow(t.Context(), "SELECT owner_node, fencing_token, expires_at > now() FROM signer_lease WHERE signer = $1", signer).
		Scan(&owner, &token, &live); err != nil {
		t.Fatal(err)
	}
	return owner, token, live
}

// The keeper's tick, lease by lease: one in use is renewed under its token; one idle past
// the timeout is released in the database too; one the database gave to another node is
// dropped; one whose local deadline passed (renewals failing for longer than it could live)
// is dropped without asking. Every lease that ends runs the lost hooks, so caches keyed by
// its epoch go.
func TestLeaseManagerTick(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		idle time.Duration
		// meanwhile happens between the acquisition and the tick.
		meanwhile func(t *testing.T, n *leaseNode, signer string, lease domain.Lease)
		wantHeld  bool
		wantLive  bool // the database row after the tick
	}{
		{name: "in use: renewed", idle: time.Hour, meanwhile: func(*testing.T, *leaseNode, string, domain.Lease) {}, wantHeld: true, wantLive: true},
		{name: "idle: released", idle: time.Nanosecond, meanwhile: func(*testing.T, *leaseNode, string, domain.Lease) { time.Sleep(time.Millisecond) }},
		{name: "taken over: dropped", idle: time.Hour, meanwhile: func(t *testing.T, n *leaseNode, signer string, lease domain.Lease) {
			if _, err := n.pool.Exec(t.Context(), "UPDATE signer_lease SET owner_node = 'node-b', fencing_token = fencing_token + 1 WHERE signer = $1", signer); err != nil {
				t.Fatal(err)
			}
		}, wantLive: true},
		{name: "past its local deadline: dropped", idle: time.Hour, meanwhile: func(_ *testing.T, n *leaseNode, _ string, _ domain.Lease) {
			n.clock.offset.Store(int64(time.Minute))
		}, wantLive: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := testsupport.MigratedPool(t)
			n := newLeaseNode(t, pool, "node-a", tc.idle)
			signer := testsupport.SignerAddress(80).Hex()
			lease, err := n.leases.Acquire(t.Context(), signer)
			if err != nil {
				t.Fatal(err)
			}
			n.resetLost() // the acquisition's own new-epoch hook
			tc.meanwhile(t, n, signer, lease)
			n.leases.Tick(t.Context())
			n.clock.offset.Store(0) // judged on the wall clock again

			current, held := n.leases.Current(signer)
			_, token, live := dbLease(t, pool, signer)
			if held != tc.wantHeld || live != tc.wantLive {
				t.Fatalf("after the tick: held %t, live in the database %t; want %t, %t", held, live, tc.wantHeld, tc.wantLive)
			}
			if held && (current.Token != lease.Token || uint64(token) != lease.Token) {
				t.Fatalf("renewal moved the token %d -> %d (database %d)", lease.Token, current.Token, token)
			}
			if wantLost := !tc.wantHeld; wantLost != slices.Equal(n.lostSigners(), []string{signer}) {
				t.Fatalf("lost hooks ran for %v, want them run: %t", n.lostSigners(), wantLost)
			}
		})
	}
}

// A fenced write drops the lease at once (the next write must not try with it); any other
// error leaves it held.
func TestLeaseManagerFence(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		err      error
		wantHeld bool
	}{
		{"a fenced write", &domain.FencedError{Signer: "s", Write: "allocation"}, false},
		{"a fenced write, wrapped", errors.Join(errors.New("batch"), &domain.FencedError{Signer: "s", Write: "allocation"}), false},
		{"a database error", errors.New("connection reset"), true},
		{"no error", nil, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			n := newLeaseNode(t, testsupport.MigratedPool(t), "node-a", time.Hour)
			signer := testsupport.SignerAddress(81).Hex()
			lease, err := n.leases.Acquire(t.Context(), signer)
			if err != nil {
				t.Fatal(err)
			}
			if got := n.leases.Fence(t.Context(), lease, tc.err); !errors.Is(got, tc.err) {
				t.Fatalf("Fence returned %v, want %v passed on", got, tc.err)
			}
			if _, held := n.leases.Current(signer); held != tc.wantHeld {
				t.Fatalf("held %t after %v, want %t", held, tc.err, tc.wantHeld)
			}
		})
	}
}

// Shutdown lets every lease go in the database, so peers take over without waiting for
// expiry, and takes no new lease afterwards.
func TestLeaseManagerReleaseAll(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	n := newLeaseNode(t, pool, "node-a", time.Hour)
	signers := []string{testsupport.SignerAddress(82).Hex(), testsupport.SignerAddress(83).Hex()}
	for _, s := range signers {
		if _, err := n.leases.Acquire(t.Context(), s); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.leases.ReleaseAll(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, s := range signers {
		if _, _, live := dbLease(t, pool, s); live {
			t.Fatalf("%s still leased in the database after shutdown", s)
		}
	}
	if held := n.leases.Held(); len(held) != 0 {
		t.Fatalf("still holding %v", held)
	}
	if _, err := n.leases.Acquire(t.Context(), testsupport.SignerAddress(84).Hex()); !errors.Is(err, domain.ErrUnavailable) {
		t.Fatalf("an acquisition while shutting down: %v, want UNAVAILABLE", err)
	}
	// A peer takes a released signer over at once, with the next token.
	peer := newLeaseNode(t, pool, "node-b", time.Hour)
	lease, err := peer.leases.Acquire(t.Context(), signers[0])
	if err != nil || lease.Token != 2 {
		t.Fatalf("the peer's acquisition: %+v, %v; want token 2", lease, err)
	}
}

// heldLeaseStore is a lease store whose answers wait until the test lets them go, and that
// fails any whose context ended meanwhile (as a database call does).
type heldLeaseStore struct {
	grantingLeases
	asked   chan struct{}
	release chan struct{}
}

func (h *heldLeaseStore) AcquireOrRenew(ctx context.Context, signer, node string, duration, skew time.Duration) (services.LeaseGrant, error) {
	h.asked <- struct{}{}
	<-h.release
	if err := ctx.Err(); err != nil {
		return services.LeaseGrant{}, err
	}
	return h.grantingLeases.AcquireOrRenew(ctx, signer, node, duration, skew)
}

// Creates that ask for one signer's lease at once share one question to the database: the
// first caller leaving (its deadline, a cancelled request) does not fail the others.
func TestALeaseAskedForTogetherSurvivesItsFirstCallerLeaving(t *testing.T) {
	t.Parallel()
	store := &heldLeaseStore{asked: make(chan struct{}, 1), release: make(chan struct{})}
	leases := services.NewLeaseManager(services.LeaseConfig{Node: "node-a", Duration: 10 * time.Second, RenewInterval: 3 * time.Second, IdleTimeout: time.Minute},
		store, services.SystemClock{}, telemetry.Noop(), testLogger())
	const signer = "0x00000000000000000000000000000000000000b1"
	first, leave := context.WithCancel(t.Context())
	firstErr := make(chan error, 1)
	go func() {
		_, err := leases.Acquire(first, signer)
		firstErr <- err
	}()
	<-store.asked
	secondErr := make(chan error, 1)
	go func() {
		_, err := leases.Acquire(t.Context(), signer)
		secondErr <- err
	}()
	time.Sleep(50 * time.Millisecond) // the second joins the flight the first started
	leave()
	select {
	case err := <-firstErr:
		if !errors.Is(err, domain.ErrUnavailable) {
			t.Fatalf("the caller that left: %v, want unavailable", err)
		}
	case <-time.After(5 * time.Second):
		close(store.release)
		t.Fatal("the caller that left still waits for the database's answer")
	}
	close(store.release)
	if err := <-secondErr; err != nil {
		t.Fatalf("the caller that waited: %v, want the lease", err)
	}
	if _, held := leases.Current(signer); !held {
		t.Fatal("the lease is not held after the shared question was answered")
	}
}
