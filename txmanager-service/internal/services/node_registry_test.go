package services_test

import (
	"context"
	"testing"
	"time"

	"github.com/go-kratos/kratos/v2/log"

	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// TestRegistryLookupServesACopyForOneHeartbeat: forwarding looks the owner up on every
// create, so Lookup answers from a copy while it is younger than a heartbeat interval;
// LookupFresh always reads the registry. A peer that restarted (new incarnation) is seen by
// Lookup once the copy ages out, and at once by LookupFresh.
func TestRegistryLookupServesACopyForOneHeartbeat(t *testing.T) {
	pool := testsupport.MigratedPool(t)
	store := repositories.NewNodeRepository(pool)
	ctx := context.Background()
	peer := services.NodeInfo{ID: "peer", Incarnation: "first", GRPCAddr: "127.0.0.1:1", HTTPAddr: "127.0.0.1:2", StartedAt: time.Now().UTC()}
	if err := store.Heartbeat(ctx, peer, time.Minute); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		heartbeat time.Duration
		fresh     bool
		want      string // incarnation seen after the peer restarted
	}{
		{"within a heartbeat the copy answers", time.Hour, false, "first"},
		{"LookupFresh reads the registry", time.Hour, true, "second"},
		{"an aged copy is read again", time.Nanosecond, false, "second"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := pool.Exec(ctx, "UPDATE node_registry SET incarnation = 'first' WHERE node_id = 'peer'"); err != nil {
				t.Fatal(err)
			}
			registry := services.NewNodeRegistry(services.NodeConfig{Self: services.NodeInfo{ID: "self"}, Timeout: time.Minute, HeartbeatInterval: tc.heartbeat},
				store, log.NewFilter(log.DefaultLogger, log.FilterLevel(log.LevelError)))
			if got, alive, err := registry.Lookup(ctx, "peer"); err != nil || !alive || got.Incarnation != "first" {
				t.Fatalf("first lookup: %+v alive=%t err=%v", got, alive, err)
			}
			// The peer restarts: same node id, another incarnation.
			if _, err := pool.Exec(ctx, "UPDATE node_registry SET incarnation = 'second' WHERE node_id = 'peer'"); err != nil {
				t.Fatal(err)
			}
			lookup := registry.Lookup
			if tc.fresh {
				lookup = registry.LookupFresh
			}
			got, alive, err := lookup(ctx, "peer")
			if err != nil || !alive || got.Incarnation != tc.want {
				t.Fatalf("after the restart: incarnation %q alive=%t err=%v, want %q", got.Incarnation, alive, err, tc.want)
			}
		})
	}
}
