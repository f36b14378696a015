package txmanager

import (
	"fmt"
	"time"

	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/wire"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ProviderSet wires Config + *pgxpool.Pool + log.Logger into a Manager:
//
//	wire.Build(..., txmanager.ProviderSet, ...)
//
// Install the global OpenTelemetry providers (otel.SetMeterProvider/SetTracerProvider)
// before the component is built, or pass them through NewComponentWithDependencies.
var ProviderSet = wire.NewSet(NewComponent, ProvideManager)

// ProviderSetWithDependencies is ProviderSet for applications that hand the component its
// collaborators (a Dependencies value in the graph) instead of relying on the global OTel
// providers, e.g. to run several instances in one process.
var ProviderSetWithDependencies = wire.NewSet(NewComponentFromPool, ProvideManager)

// Config holds the manager-wide defaults; services map their own configuration onto it.
type Config struct {
	// DefaultIsolation: read_committed (default), repeatable_read or serializable.
	DefaultIsolation string
	// DefaultTimeout bounds each transaction attempt (default 3s; negative disables).
	DefaultTimeout time.Duration
	// LockTimeout is applied with SET LOCAL lock_timeout (default 1s; negative disables).
	LockTimeout time.Duration
	// IdleInTransactionTimeout, when positive, is applied with SET LOCAL
	// idle_in_transaction_session_timeout: the server ends a session whose client went
	// silent inside a transaction (a frozen process, a lost network) instead of letting it
	// hold its locks until the connection dies.
	IdleInTransactionTimeout time.Duration
	// RetryBaseDelay and RetryMaxDelay shape the jittered exponential backoff between
	// attempts (defaults 10ms and 500ms).
	RetryBaseDelay time.Duration
	RetryMaxDelay  time.Duration
	// MeterName / TracerName name the instrumentation scope (default "lingo-utils.txmanager").
	MeterName  string
	TracerName string
	// DisableMetrics and DisableTracing switch the instrumentation off entirely.
	DisableMetrics bool
	DisableTracing bool
	// DatabaseName is reported as db.name on spans; empty means the pool's database.
	DatabaseName string
	// SeparateBegin sends BEGIN in a round trip of its own before the callback runs, as
	// pgx.BeginTx does. By default a pool's transaction begins with its first statement, in
	// the same pipeline (one round trip fewer per transaction); set it for a proxy that
	// cannot take BEGIN in a pipeline.
	SeparateBegin bool
}

const defaultScopeName = "github.com/bionicotaku/lingo-utils/txmanager"

// Check validates the configuration.
func (c Config) Check() error {
	if _, err := ParseIsolation(c.DefaultIsolation); err != nil {
		return err
	}
	if c.RetryBaseDelay < 0 || c.RetryMaxDelay < 0 {
		return fmt.Errorf("txmanager: retry delays must not be negative")
	}
	if c.RetryMaxDelay > 0 && c.RetryBaseDelay > c.RetryMaxDelay {
		return fmt.Errorf("txmanager: RetryBaseDelay %s exceeds RetryMaxDelay %s", c.RetryBaseDelay, c.RetryMaxDelay)
	}
	return nil
}

type resolvedConfig struct {
	Config
	isolation pgx.TxIsoLevel
}

func (c Config) withDefaults() (resolvedConfig, error) {
	if err := c.Check(); err != nil {
		return resolvedConfig{}, err
	}
	iso, _ := ParseIsolation(c.DefaultIsolation)
	if c.DefaultTimeout == 0 {
		c.DefaultTimeout = 3 * time.Second
	}
	if c.LockTimeout == 0 {
		c.LockTimeout = time.Second
	}
	if c.RetryBaseDelay == 0 {
		c.RetryBaseDelay = 10 * time.Millisecond
	}
	if c.RetryMaxDelay == 0 {
		c.RetryMaxDelay = max(500*time.Millisecond, c.RetryBaseDelay)
	}
	if c.MeterName == "" {
		c.MeterName = defaultScopeName
	}
	if c.TracerName == "" {
		c.TracerName = defaultScopeName
	}
	return resolvedConfig{Config: c, isolation: iso}, nil
}

// Dependencies are the manager's collaborators. Nil fields get defaults: the global OTel
// providers (no-op until an application installs real ones) and a discarding logger.
type Dependencies struct {
	Logger         log.Logger
	MeterProvider  metric.MeterProvider
	TracerProvider trace.TracerProvider
}

// Component owns a configured Manager.
type Component struct {
	Manager Manager
}

// NewComponent builds the component from configuration, the service's pool and its logger,
// with the global OpenTelemetry providers.
func NewComponent(cfg Config, pool *pgxpool.Pool, logger log.Logger) (*Component, error) {
	return NewComponentFromPool(cfg, pool, Dependencies{Logger: logger})
}

// NewComponentFromPool is NewComponentWithDependencies for a pool: Wire providers need the
// concrete type.
func NewComponentFromPool(cfg Config, pool *pgxpool.Pool, deps Dependencies) (*Component, error) {
	return NewComponentWithDependencies(cfg, pool, deps)
}

// NewComponentWithDependencies builds the component with explicit collaborators; db is
// usually a *pgxpool.Pool, whose database is reported as db.name unless the configuration
// names one.
func NewComponentWithDependencies(cfg Config, db Beginner, deps Dependencies) (*Component, error) {
	pool, isPool := db.(*pgxpool.Pool)
	// A nil *pgxpool.Pool in the interface is not == nil.
	if db == nil || (isPool && pool == nil) {
		return nil, fmt.Errorf("txmanager: nil database")
	}
	if isPool && cfg.DatabaseName == "" {
		cfg.DatabaseName = pool.Config().ConnConfig.Database
	}
	rc, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if deps.Logger == nil {
		deps.Logger = log.NewStdLogger(discard{})
	}
	if deps.MeterProvider == nil {
		deps.MeterProvider = otel.GetMeterProvider()
	}
	if deps.TracerProvider == nil {
		deps.TracerProvider = otel.GetTracerProvider()
	}
	tel, err := newTelemetry(rc, deps)
	if err != nil {
		return nil, err
	}
	m := &manager{db: db, cfg: rc, tel: tel, log: log.NewHelper(deps.Logger)}
	if isPool && !rc.SeparateBegin {
		m.pool, m.prepared = pool, newPreparedStatements(pool)
	}
	return &Component{Manager: m}, nil
}

// ProvideManager exposes the component's Manager to the service layer.
func ProvideManager(c *Component) Manager { return c.Manager }

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
