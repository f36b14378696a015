package txmanager_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-kratos/kratos/v2/log"
	"github.com/jackc/pgx/v5/pgxpool"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"
	"github.com/bionicotaku/lingo-utils/txmanager"
)

const schema = `
CREATE TABLE account (id int PRIMARY KEY, balance bigint NOT NULL);
CREATE TABLE item (id serial PRIMARY KEY, name text UNIQUE NOT NULL, account_id int REFERENCES account(id));
INSERT INTO account VALUES (1, 100), (2, 100);
`

// fixture is one test's database, pool, manager and in-memory telemetry.
type fixture struct {
	dsn     string
	pool    *pgxpool.Pool
	manager txmanager.Manager
	spans   *tracetest.SpanRecorder
	metrics *sdkmetric.ManualReader
	// logs is what the manager logged.
	logs *lockedBuffer
}

// lockedBuffer is a log's output, written by the manager's goroutines and read by the test.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func newFixture(t *testing.T, cfg txmanager.Config, configurePool ...func(*pgxpool.Config)) *fixture {
	t.Helper()
	dsn := pgtest.NewDatabase(t)
	pool := pgtest.NewPool(t, dsn, configurePool...)
	if _, err := pool.Exec(context.Background(), schema); err != nil {
		t.Fatalf("schema: %v", err)
	}
	spans := tracetest.NewSpanRecorder()
	metrics := sdkmetric.NewManualReader()
	logs := &lockedBuffer{}
	component, err := txmanager.NewComponentWithDependencies(cfg, pool, txmanager.Dependencies{
		Logger:         log.NewStdLogger(logs),
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)),
		MeterProvider:  sdkmetric.NewMeterProvider(sdkmetric.WithReader(metrics)),
	})
	if err != nil {
		t.Fatalf("component: %v", err)
	}
	return &fixture{dsn: dsn, pool: pool, manager: component.Manager, spans: spans, metrics: metrics, logs: logs}
}

func (f *fixture) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := f.pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("count %q: %v", sql, err)
	}
	return n
}

// openTransactions counts sessions of this database that sit inside a transaction, other
// than the one asking.
func (f *fixture) openTransactions(t *testing.T) int {
	t.Helper()
	return f.count(t, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()
		  AND (state LIKE 'idle in transaction%' OR (state = 'active' AND query ILIKE '%pg_sleep%'))`)
}

// eventually polls cond until it holds or the timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// collect returns the data points of every metric the manager recorded, by name.
func (f *fixture) collect(t *testing.T) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := f.metrics.Collect(context.Background(), &rm); err != nil {
		t.Fatalf("collect metrics: %v", err)
	}
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

func sumOf(agg metricdata.Aggregation) int64 {
	var total int64
	if s, ok := agg.(metricdata.Sum[int64]); ok {
		for _, dp := range s.DataPoints {
			total += dp.Value
		}
	}
	return total
}

// behindReplyDroppingProxy is a manager whose pool reaches the fixture's database through a
// replyDroppingProxy, with the proxy and the pool.
func (f *fixture) behindReplyDroppingProxy(t *testing.T) (txmanager.Manager, *replyDroppingProxy, *pgxpool.Pool) {
	t.Helper()
	u, err := url.Parse(f.dsn)
	if err != nil || u.Host == "" {
		t.Fatalf("proxying needs a URL-style DSN with a host, got %q", f.dsn)
	}
	proxy := newReplyDroppingProxy(t, u.Host)
	u.Host = proxy.addr()
	pool := pgtest.NewPool(t, u.String())
	component, err := txmanager.NewComponentWithDependencies(txmanager.Config{}, pool, txmanager.Dependencies{})
	if err != nil {
		t.Fatal(err)
	}
	return component.Manager, proxy, pool
}

// replyDroppingProxy forwards TCP to a PostgreSQL server. Once armed, it swallows the next
// reply from the server and closes that connection (later ones pass): the server has done the work,
// the client never hears about it. That is a network failure during COMMIT, made exact.
type replyDroppingProxy struct {
	listener net.Listener
	target   string
	armed    atomic.Bool
	mu       sync.Mutex
	conns    []net.Conn
	wg       sync.WaitGroup
}

func newReplyDroppingProxy(t *testing.T, target string) *replyDroppingProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := &replyDroppingProxy{listener: l, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		_ = l.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *replyDroppingProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.listener.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { defer p.wg.Done(); _, _ = io.Copy(server, client); _ = server.Close() }()
		go func() { defer p.wg.Done(); p.relayReplies(server, client) }()
	}
}

func (p *replyDroppingProxy) relayReplies(server, client net.Conn) {
	defer client.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 && p.armed.CompareAndSwap(true, false) {
			_ = server.Close()
			return
		}
		if n > 0 {
			if _, werr := client.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// dropNextReply arms the proxy.
func (p *replyDroppingProxy) dropNextReply() { p.armed.Store(true) }

func (p *replyDroppingProxy) addr() string { return p.listener.Addr().String() }
