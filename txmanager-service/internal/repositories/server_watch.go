package repositories

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/go-kratos/kratos/v2/log"
	"github.com/jackc/pgx/v5"

	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// ServerWatch notices when the pool's connections land on another database server than
// before: a failover or switchover to a standby, or a restart. Such a server may lack the
// last commits (asynchronous replication), so what the node cached from the old one must be
// read again; services.NonceCache drops its entries when the epoch moves.
type ServerWatch struct {
	log     *log.Helper
	metrics *telemetry.Metrics

	mu     sync.Mutex
	server string // identity of the server the latest new connection reached
	// epoch is read by every allocation batch (through the nonce cache), so without the lock.
	epoch atomic.Uint64
}

// NewServerWatch returns a watch that has seen no server yet.
func NewServerWatch(logger log.Logger, metrics *telemetry.Metrics) *ServerWatch {
	return &ServerWatch{log: log.NewHelper(logger), metrics: metrics}
}

// serverIdentityQuery names a server by its postmaster's start time and its address: a
// promoted standby, a restarted server and another host each differ from the server before.
// (The timeline would be exact, but pg_control_checkpoint() is for superusers only.)
const serverIdentityQuery = `SELECT pg_postmaster_start_time()::text || ' ' || coalesce(host(inet_server_addr()), 'local') || ':' || coalesce(inet_server_port(), 0)::text`

// AfterConnect is the pool's hook for every new connection.
func (w *ServerWatch) AfterConnect(ctx context.Context, conn *pgx.Conn) error {
	var identity string
	if err := conn.QueryRow(ctx, serverIdentityQuery).Scan(&identity); err != nil {
		return fmt.Errorf("identify the database server: %w", err)
	}
	if w.observe(identity) {
		w.metrics.DatabaseServerChanged(ctx)
	}
	return nil
}

// observe records the server a new connection reached and reports whether it differs from
// the one before.
func (w *ServerWatch) observe(identity string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if identity == w.server {
		return false
	}
	changed := w.server != ""
	if changed {
		epoch := w.epoch.Add(1)
		w.log.Warnw("msg", "database server changed (failover, switchover or restart): cached nonces dropped, each signer's next allocation checks the chain first",
			"previous", w.server, "now", identity, "server_epoch", epoch)
	}
	w.server = identity
	return changed
}

// ServerEpoch implements services.DatabaseServerEpoch.
func (w *ServerWatch) ServerEpoch() uint64 { return w.epoch.Load() }
