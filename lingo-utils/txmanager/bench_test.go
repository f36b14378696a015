package txmanager_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"
	"github.com/bionicotaku/lingo-utils/txmanager"
)

// benchSetup returns a pool and a manager instrumented with the real OTel SDK: every span is
// sampled and exported (to memory, reset as it goes) and every metric is aggregated.
func benchSetup(b *testing.B, pool *pgxpool.Pool, cfg txmanager.Config) txmanager.Manager {
	b.Helper()
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithBatcher(exporter, sdktrace.WithBatchTimeout(50*time.Millisecond)))
	done := make(chan struct{})
	go func() {
		ticker := time.NewTicker(100 * time.Millisecond)
		defer ticker.Stop()
		for {
			select {
			case <-done:
				return
			case <-ticker.C:
				exporter.Reset()
			}
		}
	}()
	b.Cleanup(func() {
		close(done)
		_ = tp.Shutdown(context.Background())
	})
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	component, err := txmanager.NewComponentWithDependencies(cfg, pool, txmanager.Dependencies{TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		b.Fatal(err)
	}
	return component.Manager
}

// bareTx is the baseline: pgx's own helper, opening the transaction with the same
// BEGIN statement the manager sends (isolation and access mode spelled out), then one
// statement with an argument, as an application's queries have.
func bareTx(ctx context.Context, pool *pgxpool.Pool) error {
	return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted, AccessMode: pgx.ReadWrite}, func(tx pgx.Tx) error {
		var one int
		return tx.QueryRow(ctx, "SELECT $1::int", 1).Scan(&one)
	})
}

// bareBatchBeginTx is pgx at its leanest: BEGIN queued with the statement in one pipeline
// (Batch.BeginTx), as the manager sends them, then COMMIT. Against it the ratio is the
// manager's own overhead, round trips being equal.
func bareBatchBeginTx(ctx context.Context, pool *pgxpool.Pool) error {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{IsoLevel: pgx.ReadCommitted, AccessMode: pgx.ReadWrite})
	b.Queue("SET LOCAL lock_timeout = 1000")
	b.Queue("SELECT $1::int", 1)
	br := pool.SendBatch(ctx, b)
	tx := br.Tx()
	if err := br.Close(); err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	return tx.Commit(ctx)
}

// bareExecTx is bareTx with an argument-less Exec, which the manager cannot pipeline (pgx
// sends it over the simple protocol): BEGIN goes alone, as pgx does it.
func bareExecTx(ctx context.Context, pool *pgxpool.Pool) error {
	return pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{IsoLevel: pgx.ReadCommitted, AccessMode: pgx.ReadWrite}, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SELECT 1")
		return err
	})
}

func managedTx(ctx context.Context, m txmanager.Manager) error {
	return m.WithinTx(ctx, txmanager.DefaultOptions().WithTraceName("bench"), func(ctx context.Context, s txmanager.Session) error {
		var one int
		return s.DB().QueryRow(ctx, "SELECT $1::int", 1).Scan(&one)
	})
}

func managedExecTx(ctx context.Context, m txmanager.Manager) error {
	return m.WithinTx(ctx, txmanager.DefaultOptions().WithTraceName("bench"), func(ctx context.Context, s txmanager.Session) error {
		_, err := s.DB().Exec(ctx, "SELECT 1")
		return err
	})
}

// BenchmarkTrivialTransaction compares the same one-statement transaction through bare pgx
// and through WithinTx with tracing and metrics on. Both run under a cancellable context,
// as a request handler's is. The interleaved cases alternate the two in one loop, so drift
// in the machine's speed hits both equally, and report the ratio (target: at most 1.10):
//   - same-sql: the manager's lock timeout off, against pgx.BeginTxFunc;
//   - default-config: the manager's defaults (SET LOCAL lock_timeout too), against
//     pgx.BeginTxFunc. The manager sends BEGIN with the first statement, a round trip
//     fewer than BeginTxFunc;
//   - default-config-vs-pgx-pipelined-begin: against pgx sending the same pipeline
//     (Batch.BeginTx), so round trips are equal and the ratio is the manager's own cost;
//   - default-config-exec-without-arguments: an Exec without arguments, which goes over the
//     simple protocol and so cannot share a pipeline: BEGIN goes alone on both sides.
func BenchmarkTrivialTransaction(b *testing.B) {
	pool := pgtest.NewPool(b, pgtest.NewDatabase(b))
	sameSQL := benchSetup(b, pool, txmanager.Config{LockTimeout: -1})
	defaults := benchSetup(b, pool, txmanager.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.Run("bare-pgx-BeginTxFunc", func(b *testing.B) {
		for b.Loop() {
			if err := bareTx(ctx, pool); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("WithinTx-otel-sdk", func(b *testing.B) {
		for b.Loop() {
			if err := managedTx(ctx, defaults); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, tc := range []struct {
		name    string
		bare    func(context.Context, *pgxpool.Pool) error
		managed func(context.Context, txmanager.Manager) error
		manager txmanager.Manager
	}{
		{"interleaved-same-sql", bareTx, managedTx, sameSQL},
		{"interleaved-default-config", bareTx, managedTx, defaults},
		{"interleaved-default-config-vs-pgx-pipelined-begin", bareBatchBeginTx, managedTx, defaults},
		{"interleaved-default-config-exec-without-arguments", bareExecTx, managedExecTx, defaults},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var bare, managed time.Duration
			for b.Loop() {
				start := time.Now()
				if err := tc.bare(ctx, pool); err != nil {
					b.Fatal(err)
				}
				mid := time.Now()
				if err := tc.managed(ctx, tc.manager); err != nil {
					b.Fatal(err)
				}
				bare += mid.Sub(start)
				managed += time.Since(mid)
			}
			b.ReportMetric(float64(managed)/float64(bare), "withintx/bare")
		})
	}
}
