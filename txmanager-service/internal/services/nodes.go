package services

import (
	"context"
	"time"

	"github.com/go-kratos/kratos/v2/log"
)

// NodeInfo is one service instance as the registry knows it.
type NodeInfo struct {
	ID          string
	GRPCAddr    string
	HTTPAddr    string
	Version     string
	StartedAt   time.Time
	HeartbeatAt time.Time
	Alive       bool
	// Leases this node holds now.
	Leases int
}

// NodeStore persists the node registry.
type NodeStore interface {
	Heartbeat(ctx context.Context, self NodeInfo) error
	MarkStopped(ctx context.Context, nodeID string) error
	Get(ctx context.Context, nodeID string, timeout time.Duration) (NodeInfo, bool, error)
	List(ctx context.Context, timeout time.Duration) ([]NodeInfo, error)
}

// NodeConfig is this node's registry entry and how liveness is judged.
type NodeConfig struct {
	Self NodeInfo
	// Timeout: a node that has not beaten for this long is gone.
	Timeout time.Duration
}

// NodeRegistry announces this node (heartbeats) and finds peers: the owner a create is
// forwarded to in forward routing mode, and the node list of the admin API.
type NodeRegistry struct {
	cfg   NodeConfig
	store NodeStore
	log   *log.Helper
}

// NewNodeRegistry wires the registry.
func NewNodeRegistry(cfg NodeConfig, store NodeStore, logger log.Logger) *NodeRegistry {
	return &NodeRegistry{cfg: cfg, store: store, log: log.NewHelper(log.With(logger, "component", "nodes", "node_id", cfg.Self.ID))}
}

// Heartbeat records that this node is alive.
func (r *NodeRegistry) Heartbeat(ctx context.Context) {
	if err := r.store.Heartbeat(ctx, r.cfg.Self); err != nil {
		r.log.Warnw("msg", "node heartbeat failed", "error", err.Error())
	}
}

// Leave marks this node stopped, so peers stop forwarding to it at once.
func (r *NodeRegistry) Leave(ctx context.Context) error {
	return r.store.MarkStopped(ctx, r.cfg.Self.ID)
}

// Lookup returns the node's entry and whether it is alive.
func (r *NodeRegistry) Lookup(ctx context.Context, nodeID string) (NodeInfo, bool, error) {
	return r.store.Get(ctx, nodeID, r.cfg.Timeout)
}

// List returns every registered node.
func (r *NodeRegistry) List(ctx context.Context) ([]NodeInfo, error) {
	return r.store.List(ctx, r.cfg.Timeout)
}
