package services

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-kratos/kratos/v2/log"
)

// NodeInfo is one service instance as the registry knows it.
type NodeInfo struct {
	ID string
	// Incarnation is the process behind the id: random per start, so a restarted or a
	// second process with the same id is another lease owner.
	Incarnation string
	GRPCAddr    string
	HTTPAddr    string
	Version     string
	StartedAt   time.Time
	HeartbeatAt time.Time
	Alive       bool
	// Leases this node holds now.
	Leases int
}

// ErrNodeIDInUse: another live process holds this node id in the registry.
var ErrNodeIDInUse = errors.New("node id in use by another live process")

// NodeStore persists the node registry.
type NodeStore interface {
	// Heartbeat records self as alive, and fails with ErrNodeIDInUse while another
	// incarnation of the same id beats within timeout.
	Heartbeat(ctx context.Context, self NodeInfo, timeout time.Duration) error
	MarkStopped(ctx context.Context, self NodeInfo) error
	Get(ctx context.Context, nodeID string, timeout time.Duration) (NodeInfo, bool, error)
	List(ctx context.Context, timeout time.Duration) ([]NodeInfo, error)
}

// NodeConfig is this node's registry entry and how liveness is judged.
type NodeConfig struct {
	Self NodeInfo
	// Timeout: a node that has not beaten for this long is gone.
	Timeout time.Duration
	// HeartbeatInterval is how often nodes beat; 0 means a quarter of Timeout.
	HeartbeatInterval time.Duration
}

// NodeRegistry announces this node (heartbeats) and finds peers: the owner a create is
// forwarded to in forward routing mode, and the node list of the admin API.
type NodeRegistry struct {
	cfg   NodeConfig
	store NodeStore
	log   *log.Helper

	conflictOnce sync.Once
	conflict     chan error

	mu      sync.Mutex
	entries map[string]registryEntry // peers looked up, for Lookup
}

type registryEntry struct {
	info    NodeInfo
	alive   bool
	fetched time.Time
}

// Incarnation identifies this process among every process ever started with its node id.
type Incarnation string

// NewIncarnation draws this process's incarnation.
func NewIncarnation() Incarnation { return Incarnation(strings.ToLower(rand.Text()[:16])) }

// LeaseOwner is how this process appears as a lease owner: node id and incarnation.
func LeaseOwner(nodeID string, incarnation Incarnation) string {
	return nodeID + "#" + string(incarnation)
}

// SplitLeaseOwner is LeaseOwner's inverse; an owner written before incarnations has none.
func SplitLeaseOwner(owner string) (nodeID string, incarnation Incarnation) {
	if i := strings.LastIndexByte(owner, '#'); i >= 0 {
		return owner[:i], Incarnation(owner[i+1:])
	}
	return owner, ""
}

// NewNodeRegistry wires the registry.
func NewNodeRegistry(cfg NodeConfig, store NodeStore, logger log.Logger) *NodeRegistry {
	return &NodeRegistry{cfg: cfg, store: store, conflict: make(chan error, 1), entries: map[string]registryEntry{},
		log: log.NewHelper(log.With(logger, "component", "nodes", "node_id", cfg.Self.ID, "incarnation", cfg.Self.Incarnation))}
}

// Join registers this process under its node id before it serves. While another live
// process holds the id it waits up to twice the node timeout (a process just killed stops
// beating within one) and then refuses: two processes must never serve as one node.
func (r *NodeRegistry) Join(ctx context.Context) error {
	deadline := time.Now().Add(2*r.cfg.Timeout + time.Second)
	for {
		err := r.store.Heartbeat(ctx, r.cfg.Self, r.cfg.Timeout)
		if !errors.Is(err, ErrNodeIDInUse) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node id %q: %w (it keeps beating in the node registry); give every instance its own node.id (NODE_ID)", r.cfg.Self.ID, err)
		}
		r.log.Warnw("msg", "node id held by another process; waiting to see whether it is alive", "error", err.Error())
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(r.cfg.Timeout / 4):
		}
	}
}

// Heartbeat records that this node is alive. If another process took the node id over
// (this one was silent past the timeout, paused or cut off), Conflicts reports it: this
// process must stop serving.
func (r *NodeRegistry) Heartbeat(ctx context.Context) {
	err := r.store.Heartbeat(ctx, r.cfg.Self, r.cfg.Timeout)
	switch {
	case errors.Is(err, ErrNodeIDInUse):
		r.log.Errorw("msg", "another process took this node id over; stopping", "error", err.Error())
		r.conflictOnce.Do(func() { r.conflict <- err })
	case err != nil:
		r.log.Warnw("msg", "node heartbeat failed", "error", err.Error())
	}
}

// Conflicts delivers the error that ends this process's right to serve under its node id.
func (r *NodeRegistry) Conflicts() <-chan error { return r.conflict }

// Leave marks this node stopped, so peers stop forwarding to it at once.
func (r *NodeRegistry) Leave(ctx context.Context) error {
	return r.store.MarkStopped(ctx, r.cfg.Self)
}

// Lookup returns the node's entry and whether it is alive.
//
// Forwarding asks for the owner of every create it forwards, so the answer comes from a
// copy at most one heartbeat interval old (the registry is no fresher than that itself)
// instead of a database round trip per request; a caller that finds the copy dead or of
// another incarnation asks LookupFresh.
func (r *NodeRegistry) Lookup(ctx context.Context, nodeID string) (NodeInfo, bool, error) {
	r.mu.Lock()
	e, ok := r.entries[nodeID]
	r.mu.Unlock()
	if ok && time.Since(e.fetched) < r.heartbeatInterval() {
		return e.info, e.alive, nil
	}
	return r.LookupFresh(ctx, nodeID)
}

// LookupFresh reads the peer's entry from the registry itself.
func (r *NodeRegistry) LookupFresh(ctx context.Context, nodeID string) (NodeInfo, bool, error) {
	fetched := time.Now()
	info, alive, err := r.store.Get(ctx, nodeID, r.cfg.Timeout)
	if err != nil {
		return info, alive, err
	}
	r.mu.Lock()
	r.entries[nodeID] = registryEntry{info: info, alive: alive, fetched: fetched}
	r.mu.Unlock()
	return info, alive, nil
}

// heartbeatInterval is how often a node beats.
func (r *NodeRegistry) heartbeatInterval() time.Duration {
	if r.cfg.HeartbeatInterval > 0 {
		return r.cfg.HeartbeatInterval
	}
	return r.cfg.Timeout / 4
}

// List returns every registered node.
func (r *NodeRegistry) List(ctx context.Context) ([]NodeInfo, error) {
	return r.store.List(ctx, r.cfg.Timeout)
}
