package services_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// A lease owner is node id and incarnation; an owner written before incarnations is the
// node id alone.
func TestLeaseOwnerRoundTrips(t *testing.T) {
	t.Parallel()
	tests := []struct {
		owner, node string
		incarnation services.Incarnation
	}{
		{services.LeaseOwner("node-a", "abc"), "node-a", "abc"},
		{"node-a", "node-a", ""},
		{services.LeaseOwner("pod#7", "xyz"), "pod#7", "xyz"},
	}
	for _, tc := range tests {
		node, incarnation := services.SplitLeaseOwner(tc.owner)
		if node != tc.node || incarnation != tc.incarnation {
			t.Errorf("%q: %q %q, want %q %q", tc.owner, node, incarnation, tc.node, tc.incarnation)
		}
	}
	a, b := services.NewIncarnation(), services.NewIncarnation()
	if a == b || len(a) != 16 || strings.ToLower(string(a)) != string(a) {
		t.Errorf("incarnations %q and %q, want two different 16-character lower-case ids", a, b)
	}
}

// Two processes must never serve as one node: joining under an id another live process
// beats under is refused after waiting for it to go silent, and one that went silent is
// taken over once it is past the node timeout.
func TestNodeRegistryJoin(t *testing.T) {
	t.Parallel()
	const timeout = 500 * time.Millisecond
	tests := []struct {
		name string
		// otherKeepsBeating: the other process beats until the join ends.
		otherKeepsBeating bool
		wantErr           error
	}{
		{"the other process is alive", true, services.ErrNodeIDInUse},
		{"the other process went silent", false, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			store := repositories.NewNodeRepository(testsupport.MigratedPool(t))
			other := services.NodeInfo{ID: "node-a", Incarnation: "first", StartedAt: time.Now().UTC()}
			if err := store.Heartbeat(t.Context(), other, timeout); err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			if tc.otherKeepsBeating {
				go func() {
					for {
						select {
						case <-done:
							return
						case <-time.After(timeout / 5):
							_ = store.Heartbeat(context.Background(), other, timeout)
						}
					}
				}()
			}
			self := services.NewNodeRegistry(services.NodeConfig{Self: services.NodeInfo{ID: "node-a", Incarnation: "second", StartedAt: time.Now().UTC()}, Timeout: timeout},
				store, testLogger())
			err := self.Join(t.Context())
			close(done)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("join: %v, want %v", err, tc.wantErr)
			}
		})
	}
}

// A process that was silent past the node timeout, whose id another process took over, is
// told by its next heartbeat to stop serving; leaving marks a node stopped at once, so peers
// stop forwarding to it.
func TestNodeRegistryConflictAndLeave(t *testing.T) {
	t.Parallel()
	const timeout = 500 * time.Millisecond
	store := repositories.NewNodeRepository(testsupport.MigratedPool(t))
	registry := func(incarnation string) *services.NodeRegistry {
		return services.NewNodeRegistry(services.NodeConfig{Self: services.NodeInfo{ID: "node-a", Incarnation: incarnation, StartedAt: time.Now().UTC()}, Timeout: timeout},
			store, testLogger())
	}
	paused, successor := registry("paused"), registry("successor")
	if err := paused.Join(t.Context()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(timeout + 100*time.Millisecond) // paused past the node timeout
	if err := successor.Join(t.Context()); err != nil {
		t.Fatalf("the successor's join: %v", err)
	}
	paused.Heartbeat(t.Context())
	select {
	case err := <-paused.Conflicts():
		if !errors.Is(err, services.ErrNodeIDInUse) {
			t.Fatalf("conflict %v, want ErrNodeIDInUse", err)
		}
	case <-time.After(time.Second):
		t.Fatal("the paused process was not told to stop")
	}
	select {
	case err := <-successor.Conflicts():
		t.Fatalf("the successor was told to stop: %v", err)
	default:
	}

	if _, alive, err := successor.LookupFresh(t.Context(), "node-a"); err != nil || !alive {
		t.Fatalf("the successor before leaving: alive %t (%v)", alive, err)
	}
	if err := successor.Leave(t.Context()); err != nil {
		t.Fatal(err)
	}
	nodes, err := successor.List(t.Context())
	if err != nil || len(nodes) != 1 || nodes[0].Alive || nodes[0].Incarnation != "successor" {
		t.Fatalf("nodes after leaving: %+v (%v), want the successor, not alive", nodes, err)
	}
}
