package repositories

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-kratos/kratos/v2/log"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"

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
	// replication is what the current server says of its replication (Replication).
	replication atomic.Pointer[Replication]
}

// Replication is what a database server's settings say about losing commits in a failover.
type Replication struct {
	// Mode is "synchronous" (a commit waits for a standby: a failover to it loses no
	// acknowledged commit), "asynchronous" (it does not: a failover may lose the last
	// commits) or "unknown" (the settings could not be read, e.g. behind a pooler).
	Mode                    string
	SynchronousCommit       string
	SynchronousStandbyNames string
}

// Replication modes.
const (
	ReplicationSynchronous  = "synchronous"
	ReplicationAsynchronous = "asynchronous"
	ReplicationUnknown      = "unknown"
)

// replicationOf judges the two settings: commits wait for a standby only when standbys are
// named and synchronous_commit is one of the levels that waits for them.
func replicationOf(synchronousCommit, standbyNames string) Replication {
	r := Replication{Mode: ReplicationAsynchronous, SynchronousCommit: synchronousCommit, SynchronousStandbyNames: standbyNames}
	switch synchronousCommit {
	case "on", "remote_write", "remote_apply":
		if strings.TrimSpace(standbyNames) != "" {
			r.Mode = ReplicationSynchronous
		}
	}
	return r
}

// Describe is the replication as /readyz and the logs show it.
func (r Replication) Describe() string {
	switch r.Mode {
	case ReplicationUnknown:
		return "unknown (the server's replication settings could not be read)"
	case ReplicationSynchronous:
		return fmt.Sprintf("synchronous (synchronous_commit=%s, synchronous_standby_names=%q)", r.SynchronousCommit, r.SynchronousStandbyNames)
	default:
		return fmt.Sprintf("asynchronous (synchronous_commit=%s, synchronous_standby_names=%q): a failover may lose the last acknowledged commits",
			r.SynchronousCommit, r.SynchronousStandbyNames)
	}
}

// ReplicationSummary is the current server's replication as /readyz shows it.
func (w *ServerWatch) ReplicationSummary() string { return w.Replication().Describe() }

// Replication is the current server's replication as last read (unknown before any).
func (w *ServerWatch) Replication() Replication {
	if r := w.replication.Load(); r != nil {
		return *r
	}
	return Replication{Mode: ReplicationUnknown}
}

// NewServerWatch returns a watch that has seen no server yet, with its replication gauge.
func NewServerWatch(logger log.Logger, metrics *telemetry.Metrics) (*ServerWatch, error) {
	w := &ServerWatch{log: log.NewHelper(logger), metrics: metrics}
	return w, w.registerReplicationGauge()
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
	first, changed := w.observe(identity)
	if changed {
		w.metrics.DatabaseServerChanged(ctx)
	}
	if first || changed {
		w.readReplication(ctx, conn, identity)
	}
	return nil
}

// readReplication reads, at start and on every change of server, what the server says of
// its replication, and reports it (log line, metric, readiness detail). A server that will
// not say is "unknown", never a failed connection.
func (w *ServerWatch) readReplication(ctx context.Context, conn *pgx.Conn, identity string) {
	var synchronousCommit, standbyNames string
	r := Replication{Mode: ReplicationUnknown}
	err := conn.QueryRow(ctx, "SELECT current_setting('synchronous_commit'), current_setting('synchronous_standby_names')").Scan(&synchronousCommit, &standbyNames)
	if err == nil {
		r = replicationOf(synchronousCommit, standbyNames)
	}
	w.replication.Store(&r)
	fields := []any{"msg", "database replication: " + r.Describe(), "server", identity, "replication", r.Mode}
	if err != nil {
		fields = append(fields, "error", err.Error())
	}
	if r.Mode == ReplicationSynchronous {
		w.log.Infow(fields...)
	} else {
		w.log.Warnw(fields...)
	}
}

// observe records the server a new connection reached and reports whether it is the first
// seen and whether it differs from the one before.
func (w *ServerWatch) observe(identity string) (first, changed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if identity == w.server {
		return false, false
	}
	first, changed = w.server == "", w.server != ""
	if changed {
		epoch := w.epoch.Add(1)
		w.log.Warnw("msg", "database server changed (failover, switchover or restart): cached nonces dropped, each signer's next allocation checks the chain first",
			"previous", w.server, "now", identity, "server_epoch", epoch)
	}
	w.server = identity
	return first, changed
}

// registerReplicationGauge reports the current server's replication as
// database_synchronous_replication: 1 synchronous, 0 asynchronous, -1 unknown.
func (w *ServerWatch) registerReplicationGauge() error {
	return w.metrics.RegisterGauge(telemetry.DatabaseSynchronousReplication,
		"1 when the database server's commits wait for a standby (synchronous_commit and synchronous_standby_names), 0 when they do not (a failover may lose the last commits), -1 when unknown.",
		func(_ context.Context, record func(int64, ...attribute.KeyValue)) {
			switch w.Replication().Mode {
			case ReplicationSynchronous:
				record(1)
			case ReplicationAsynchronous:
				record(0)
			default:
				record(-1)
			}
		})
}

// ServerEpoch implements services.DatabaseServerEpoch.
func (w *ServerWatch) ServerEpoch() uint64 { return w.epoch.Load() }
