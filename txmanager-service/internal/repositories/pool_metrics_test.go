package repositories_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/go-kratos/kratos/v2/log"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// connections is the scrape key of the connections gauge in state.
func connections(state string) string {
	return telemetry.DatabasePoolConnections + "{state=" + state + "}"
}

// poolFigures are a scrape of the pool's metrics: gauges and counters by name, the
// connections gauge by name and state (connections).
type poolFigures map[string]float64

// openMeasuredPool opens the service's pool on a fresh database with its metrics on a reader
// of their own, and returns a scrape function.
func openMeasuredPool(t *testing.T, maxConns int32) (*pgxpool.Pool, func() poolFigures) {
	t.Helper()
	metrics, reader := testsupport.RecordedMetrics(t)
	logger := log.NewStdLogger(t.Output())
	watch, err := repositories.NewServerWatch(logger, metrics)
	if err != nil {
		t.Fatal(err)
	}
	database := conf.Database{DSN: pgtest.NewDatabase(t), MaxConns: maxConns, QueryExecMode: "cache_statement"}
	pool, closePool, err := repositories.NewPool(database, logger, watch, metrics)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closePool)
	return pool, func() poolFigures {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(t.Context(), &rm); err != nil {
			t.Fatal(err)
		}
		got := poolFigures{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				switch data := m.Data.(type) {
				case metricdata.Gauge[int64]:
					for _, dp := range data.DataPoints {
						state, _ := dp.Attributes.Value(attribute.Key("state"))
						key := m.Name
						if state.AsString() != "" {
							key += "{state=" + state.AsString() + "}"
						}
						got[key] = float64(dp.Value)
					}
				case metricdata.Sum[int64]:
					for _, dp := range data.DataPoints {
						got[m.Name] = float64(dp.Value)
					}
				case metricdata.Sum[float64]:
					for _, dp := range data.DataPoints {
						got[m.Name] = dp.Value
					}
				}
			}
		}
		return got
	}
}

// With database.maxConns 0 the pool is sized by the cores, and says so.
func TestPoolSizedByTheCores(t *testing.T) {
	t.Parallel()
	pool, scrape := openMeasuredPool(t, 0)
	want := (conf.Database{}).PoolSize(runtime.GOMAXPROCS(0))
	if got := pool.Config().MaxConns; got != want {
		t.Errorf("pool opens at most %d connections, want %d for %d cores", got, want, runtime.GOMAXPROCS(0))
	}
	if got := scrape()[telemetry.DatabasePoolMaxConnections]; got != float64(want) {
		t.Errorf("%s = %v, want %d", telemetry.DatabasePoolMaxConnections, got, want)
	}
}

// A pool whose every connection is in use makes the next acquire wait: the metrics show
// the connections in use and count the wait with its time.
func TestPoolMetricsShowConnectionsAndWaits(t *testing.T) {
	t.Parallel()
	const size = 3
	pool, scrape := openMeasuredPool(t, size)
	held := make([]*pgxpool.Conn, 0, size)
	for range size {
		conn, err := pool.Acquire(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, conn)
	}
	// An acquire that opened a connection counted as a wait too: the waits count from here.
	busy := scrape()
	if busy[connections("acquired")] != size || busy[connections("idle")] != 0 {
		t.Errorf("with all %d connections held: acquired %v, idle %v", size, busy[connections("acquired")], busy[connections("idle")])
	}

	// One more acquire has to wait for a release. It is released only after the acquire
	// began and a margin passed, so that it found every connection held.
	began := make(chan struct{})
	waited := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		close(began)
		conn, err := pool.Acquire(t.Context())
		if err != nil {
			t.Error(err)
			waited <- 0
			return
		}
		conn.Release()
		waited <- time.Since(start)
	}()
	<-began
	time.Sleep(200 * time.Millisecond)
	held[0].Release()
	longest := <-waited
	for _, conn := range held[1:] {
		conn.Release()
	}

	after := scrape()
	if got := after[telemetry.DatabasePoolAcquireWaitsTotal] - busy[telemetry.DatabasePoolAcquireWaitsTotal]; got != 1 {
		t.Errorf("%s grew by %v while one acquire waited, want 1", telemetry.DatabasePoolAcquireWaitsTotal, got)
	}
	if got := after[telemetry.DatabasePoolAcquireWaitSecondsTotal] - busy[telemetry.DatabasePoolAcquireWaitSecondsTotal]; got <= 0 || got > longest.Seconds() {
		t.Errorf("%s grew by %v, want more than 0 and at most the %v the waiting acquire took", telemetry.DatabasePoolAcquireWaitSecondsTotal, got, longest)
	}
	if after[connections("acquired")] != 0 || after[connections("idle")] != size {
		t.Errorf("after every release: acquired %v, idle %v, want 0 and %d", after[connections("acquired")], after[connections("idle")], size)
	}
}
