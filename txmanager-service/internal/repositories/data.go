package repositories

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/wire"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/pipeline"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/receipts"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/reconcile"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/stuck"
	"github.com/bionicotaku/txmanager-service/internal/pipeline/submitting"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// ProviderSet is the data layer the whole process shares: pool, transaction manager and the
// repositories of what is not per chain (feed, nodes, retention, chain identities).
var ProviderSet = wire.NewSet(
	NewServerWatch,
	NewPool,
	NewTxManagerConfig,
	txmanager.ProviderSetWithDependencies,
	NewCompletionRepository,
	wire.Bind(new(services.CompletionStore), new(*CompletionRepository)),
	NewStandbyRepository,
	wire.Bind(new(services.StandbyBarrier), new(*StandbyRepository)),
	NewNodeRepository,
	wire.Bind(new(services.NodeStore), new(*NodeRepository)),
	NewRetentionRepository,
	wire.Bind(new(services.RetentionStore), new(*RetentionRepository)),
	NewChainIdentityRepository,
	wire.Bind(new(services.ChainIdentityStore), new(*ChainIdentityRepository)),
	NewRosterRepository,
	wire.Bind(new(services.RosterStore), new(*RosterRepository)),
	NewAuditRepository,
	wire.Bind(new(services.AuditStore), new(*AuditRepository)),
	NewPolicyRepository,
	wire.Bind(new(services.PolicyStore), new(*PolicyRepository)),
	NewApprovalRepository,
	wire.Bind(new(services.ApprovalStore), new(*ApprovalRepository)),
	NewWebhookRepository,
	wire.Bind(new(services.SubscriptionStore), new(*WebhookRepository)),
	NewEventRepository,
	wire.Bind(new(services.EventStore), new(*EventRepository)),
	wire.Bind(new(services.FundingStore), new(*EventRepository)),
	NewConsoleRepository,
	wire.Bind(new(services.ConsoleStore), new(*ConsoleRepository)),
)

// ChainProviderSet is the repositories of one chain: each reads and writes that chain's
// rows only.
var ChainProviderSet = wire.NewSet(
	NewLeaseRepository,
	wire.Bind(new(services.LeaseStore), new(*LeaseRepository)),
	NewAllocationRepository,
	wire.Bind(new(services.AllocationStore), new(*AllocationRepository)),
	NewTxRepository,
	wire.Bind(new(services.TxReader), new(*TxRepository)),
	NewAttemptRepository,
	wire.Bind(new(pipeline.AttemptStore), new(*AttemptRepository)),
	NewSubmittingRepository,
	wire.Bind(new(submitting.Store), new(*SubmittingRepository)),
	NewReceiptRepository,
	wire.Bind(new(receipts.Store), new(*ReceiptRepository)),
	NewStuckRepository,
	wire.Bind(new(stuck.Store), new(*StuckRepository)),
	NewReconcileRepository,
	wire.Bind(new(reconcile.Store), new(*ReconcileRepository)),
	NewOpenSignerRepository,
	wire.Bind(new(services.OpenSignerStore), new(*OpenSignerRepository)),
	NewAdminRepository,
	wire.Bind(new(services.AdminStore), new(*AdminRepository)),
	NewFundsRepository,
	wire.Bind(new(services.FundsStore), new(*FundsRepository)),
	NewEventRepository,
	wire.Bind(new(services.EventStore), new(*EventRepository)),
	wire.Bind(new(services.FundingStore), new(*EventRepository)),
	NewSigningRepository,
	wire.Bind(new(services.SigningHealthStore), new(*SigningRepository)),
	wire.Bind(new(services.SignerConditionStore), new(*SigningRepository)),
)

// NewPool opens the service's connection pool, sized by c.PoolSize, and checks it can reach
// the database; watch sees every new connection's server.
func NewPool(c conf.Database, logger log.Logger, watch *ServerWatch, metrics *telemetry.Metrics) (*pgxpool.Pool, func(), error) {
	cfg, err := pgxpool.ParseConfig(c.DSN)
	if err != nil {
		// pgx's message may quote the DSN, password included: keep it out of logs.
		return nil, nil, fmt.Errorf("database.dsn is not a valid PostgreSQL connection string")
	}
	cfg.MaxConns = c.PoolSize(runtime.GOMAXPROCS(0))
	cfg.MinConns = min(c.MinConns, cfg.MaxConns)
	mode, err := conf.ParseQueryExecMode(c.QueryExecMode)
	if err != nil {
		return nil, nil, err
	}
	cfg.ConnConfig.DefaultQueryExecMode = mode
	cfg.ConnConfig.OnPgError = explainPreparedStatementErrors(cfg.ConnConfig.OnPgError, log.NewHelper(logger), c.QueryExecMode)
	cfg.AfterConnect = watch.AfterConnect
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("open database pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("reach database %s@%s/%s: %w", cfg.ConnConfig.User, cfg.ConnConfig.Host, cfg.ConnConfig.Database, err)
	}
	if err := registerPoolMetrics(pool, metrics); err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("database pool metrics: %w", err)
	}
	log.NewHelper(logger).Infow("msg", "database pool open", "host", cfg.ConnConfig.Host, "database", cfg.ConnConfig.Database, "max_conns", cfg.MaxConns, "min_conns", cfg.MinConns, "exec_mode", mode.String())
	return pool, pool.Close, nil
}

// Prepared-statement failures: a named statement the server already has (42P05) or no
// longer has (26000). Behind a transaction-mode pooler without prepared-statement support
// each transaction may run on another server connection, so pgx's statement cache fails
// with these.
const (
	sqlStateDuplicatePreparedStatement = "42P05"
	sqlStateInvalidStatementName       = "26000"
)

// explainPreparedStatementErrors logs, at most once a minute, what to change when the
// server refuses a prepared statement: the error itself names only the statement.
func explainPreparedStatementErrors(next func(*pgconn.PgConn, *pgconn.PgError) bool, logger *log.Helper, mode string) func(*pgconn.PgConn, *pgconn.PgError) bool {
	var last atomic.Int64
	return func(conn *pgconn.PgConn, pgErr *pgconn.PgError) bool {
		if pgErr.Code == sqlStateDuplicatePreparedStatement || pgErr.Code == sqlStateInvalidStatementName {
			now := time.Now().UnixNano()
			if prev := last.Load(); now-prev > int64(time.Minute) && last.CompareAndSwap(prev, now) {
				logger.Errorw("msg", "database.queryExecMode: the database refused a prepared statement; behind a transaction-mode pooler "+
					"(PgBouncer, Supabase's pooler) set database.queryExecMode to exec or simple_protocol",
					"query_exec_mode", mode, "sql_state", pgErr.Code, "error", pgErr.Message)
			}
		}
		if next != nil {
			return next(conn, pgErr)
		}
		return pgErr.Severity != "FATAL" // pgx's own default: a FATAL error ends the connection
	}
}

// NewTxManagerConfig maps database.tx onto the library's configuration.
func NewTxManagerConfig(c conf.Database, lease conf.Lease) txmanager.Config {
	return txmanager.Config{
		DefaultIsolation: c.Tx.Isolation,
		DefaultTimeout:   c.Tx.Timeout.Std(),
		LockTimeout:      c.Tx.LockTimeout.Std(),
		// Never longer than a lease: a takeover must not wait on a frozen owner for more.
		IdleInTransactionTimeout: min(c.Tx.IdleInTransactionTimeout.Std(), lease.Duration.Std()),
	}
}
