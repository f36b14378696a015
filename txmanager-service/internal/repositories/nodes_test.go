package repositories_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// A node id belongs to one process at a time, judged by the database clock: another
// incarnation takes it only once the holder stopped or fell silent past the timeout; a node
// listed shows how many leases it holds.
func TestNodeRepositoryOneProcessPerNodeID(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	nodes := repositories.NewNodeRepository(pool)
	const timeout = time.Minute
	first := services.NodeInfo{ID: "node-a", Incarnation: "first", GRPCAddr: "10.0.0.1:9090", HTTPAddr: "10.0.0.1:8080", Version: "v1", StartedAt: time.Now().UTC()}
	second := first
	second.Incarnation, second.GRPCAddr = "second", "10.0.0.2:9090"
	steps := []struct {
		name        string
		do          func() error
		wantErr     error
		wantHolder  string
		wantAlive   bool
		errMentions string
	}{
		{name: "the first process registers", do: func() error { return nodes.Heartbeat(t.Context(), first, timeout) }, wantHolder: "first", wantAlive: true},
		{name: "it beats again", do: func() error { return nodes.Heartbeat(t.Context(), first, timeout) }, wantHolder: "first", wantAlive: true},
		{name: "a second process under the id is refused", do: func() error { return nodes.Heartbeat(t.Context(), second, timeout) },
			wantErr: services.ErrNodeIDInUse, errMentions: "10.0.0.1:9090", wantHolder: "first", wantAlive: true},
		{name: "the first stops", do: func() error { return nodes.MarkStopped(t.Context(), first) }, wantHolder: "first"},
		{name: "the second takes the id over", do: func() error { return nodes.Heartbeat(t.Context(), second, timeout) }, wantHolder: "second", wantAlive: true},
		{name: "the first, stopped, cannot mark the second stopped", do: func() error { return nodes.MarkStopped(t.Context(), first) }, wantHolder: "second", wantAlive: true},
		{name: "a silent holder is taken over after the timeout", do: func() error {
			if _, err := pool.Exec(t.Context(), "UPDATE node_registry SET heartbeat_at = now() - interval '2 minutes' WHERE node_id = 'node-a'"); err != nil {
				t.Fatal(err)
			}
			return nodes.Heartbeat(t.Context(), first, timeout)
		}, wantHolder: "first", wantAlive: true},
	}
	for _, s := range steps {
		err := s.do()
		if !errors.Is(err, s.wantErr) || (s.errMentions != "" && !strings.Contains(err.Error(), s.errMentions)) {
			t.Fatalf("%s: %v, want %v mentioning %q", s.name, err, s.wantErr, s.errMentions)
		}
		holder, alive, err := nodes.Get(t.Context(), "node-a", timeout)
		if err != nil || holder.Incarnation != s.wantHolder || alive != s.wantAlive {
			t.Fatalf("%s: holder %q alive %t (%v), want %q alive %t", s.name, holder.Incarnation, alive, err, s.wantHolder, s.wantAlive)
		}
	}
	if _, alive, err := nodes.Get(t.Context(), "node-z", timeout); err != nil || alive {
		t.Fatalf("a node never registered: alive %t (%v)", alive, err)
	}

	acquireLease(t, pool, testsupport.SignerAddress(210).Hex(), "node-a#first")
	acquireLease(t, pool, testsupport.SignerAddress(211).Hex(), "node-a#first")
	listed, err := nodes.List(t.Context(), timeout)
	if err != nil || len(listed) != 1 || listed[0].Incarnation != "first" || !listed[0].Alive || listed[0].Leases != 2 || listed[0].Version != "v1" {
		t.Fatalf("nodes %+v (%v), want node-a (first) alive with its 2 leases", listed, err)
	}
}

// The chain a database serves is recorded once; a second record of the same id keeps the
// first (a concurrent first start), and the list is in recording order.
func TestChainIdentityRepository(t *testing.T) {
	t.Parallel()
	identities := repositories.NewChainIdentityRepository(testsupport.MigratedPool(t))
	for _, id := range []services.ChainIdentity{
		{ChainID: "1337", GenesisHash: "0xaa"},
		{ChainID: "1337", GenesisHash: "0xbb"},
		{ChainID: "42161", GenesisHash: "0xcc"},
	} {
		if err := identities.Record(t.Context(), id); err != nil {
			t.Fatal(err)
		}
	}
	got, err := identities.List(t.Context())
	want := []services.ChainIdentity{{ChainID: "1337", GenesisHash: "0xaa"}, {ChainID: "42161", GenesisHash: "0xcc"}}
	if err != nil || len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("identities %+v (%v), want %+v", got, err, want)
	}
}
