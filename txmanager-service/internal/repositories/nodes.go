package repositories

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/repositories/sqlcdb"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// NodeRepository implements services.NodeStore.
type NodeRepository struct {
	q *sqlcdb.Queries
}

// NewNodeRepository builds the repository on the pool.
func NewNodeRepository(pool *pgxpool.Pool) *NodeRepository {
	return &NodeRepository{q: sqlcdb.New(pool)}
}

// Heartbeat implements services.NodeStore.
func (r *NodeRepository) Heartbeat(ctx context.Context, self services.NodeInfo, timeout time.Duration) error {
	rows, err := r.q.HeartbeatNode(ctx, sqlcdb.HeartbeatNodeParams{
		NodeID: self.ID, Incarnation: self.Incarnation, GrpcAddr: self.GRPCAddr, HttpAddr: self.HTTPAddr, Version: self.Version,
		StartedAt: self.StartedAt, TimeoutSeconds: timeout.Seconds(),
	})
	if err != nil {
		return fmt.Errorf("node heartbeat: %w", err)
	}
	if len(rows) > 0 {
		return nil
	}
	holder, alive, err := r.Get(ctx, self.ID, timeout)
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: incarnation %s (alive %v, last beat %s, gRPC %s)", services.ErrNodeIDInUse, holder.Incarnation, alive,
		holder.HeartbeatAt.UTC().Format(time.RFC3339), holder.GRPCAddr)
}

// MarkStopped implements services.NodeStore.
func (r *NodeRepository) MarkStopped(ctx context.Context, self services.NodeInfo) error {
	return r.q.MarkNodeStopped(ctx, sqlcdb.MarkNodeStoppedParams{NodeID: self.ID, Incarnation: self.Incarnation})
}

// Get implements services.NodeStore.
func (r *NodeRepository) Get(ctx context.Context, nodeID string, timeout time.Duration) (services.NodeInfo, bool, error) {
	row, err := r.q.GetNode(ctx, sqlcdb.GetNodeParams{NodeID: nodeID, TimeoutSeconds: timeout.Seconds()})
	if errors.Is(err, pgx.ErrNoRows) {
		return services.NodeInfo{}, false, nil
	}
	if err != nil {
		return services.NodeInfo{}, false, fmt.Errorf("get node %s: %w", nodeID, err)
	}
	info := services.NodeInfo{ID: row.NodeID, Incarnation: row.Incarnation, GRPCAddr: row.GrpcAddr, HTTPAddr: row.HttpAddr, Version: row.Version,
		StartedAt: row.StartedAt, HeartbeatAt: row.HeartbeatAt, Alive: row.Alive}
	return info, row.Alive, nil
}

// List implements services.NodeStore.
func (r *NodeRepository) List(ctx context.Context, timeout time.Duration) ([]services.NodeInfo, error) {
	rows, err := r.q.ListNodes(ctx, timeout.Seconds())
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	out := make([]services.NodeInfo, 0, len(rows))
	for _, row := range rows {
		out = append(out, services.NodeInfo{ID: row.NodeID, Incarnation: row.Incarnation, GRPCAddr: row.GrpcAddr, HTTPAddr: row.HttpAddr, Version: row.Version,
			StartedAt: row.StartedAt, HeartbeatAt: row.HeartbeatAt, Alive: row.Alive, Leases: int(row.Leases)})
	}
	return out, nil
}
