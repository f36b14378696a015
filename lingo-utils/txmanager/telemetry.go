package txmanager

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Metric names, as the library's users alert on them.
const (
	MetricDuration = "db.tx.duration"
	MetricActive   = "db.tx.active"
	MetricRetries  = "db.tx.retries"
	MetricFailures = "db.tx.failures"
)

type telemetry struct {
	// attrSets caches metric attribute sets by attrKey: building a set sorts and hashes its
	// attributes, which would otherwise cost more than the rest of the bookkeeping together.
	attrSets sync.Map
	tracer   trace.Tracer
	dbName   string
	duration metric.Float64Histogram
	active   metric.Int64UpDownCounter
	retries  metric.Int64Counter
	failures metric.Int64Counter
}

func newTelemetry(cfg resolvedConfig, deps Dependencies) (*telemetry, error) {
	mp, tp := deps.MeterProvider, deps.TracerProvider
	if cfg.DisableMetrics {
		mp = metricnoop.NewMeterProvider()
	}
	if cfg.DisableTracing {
		tp = tracenoop.NewTracerProvider()
	}
	meter := mp.Meter(cfg.MeterName)
	t := &telemetry{tracer: tp.Tracer(cfg.TracerName), dbName: cfg.DatabaseName}
	var err error
	if t.duration, err = meter.Float64Histogram(MetricDuration,
		metric.WithUnit("s"),
		metric.WithDescription("Duration of database transactions, retries included."),
		metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)); err != nil {
		return nil, err
	}
	if t.active, err = meter.Int64UpDownCounter(MetricActive,
		metric.WithUnit("{transaction}"),
		metric.WithDescription("Database transactions currently open.")); err != nil {
		return nil, err
	}
	if t.retries, err = meter.Int64Counter(MetricRetries,
		metric.WithUnit("{retry}"),
		metric.WithDescription("Transactions re-run after a retryable failure.")); err != nil {
		return nil, err
	}
	if t.failures, err = meter.Int64Counter(MetricFailures,
		metric.WithUnit("{transaction}"),
		metric.WithDescription("Transactions that finished with an error (timeouts and cancellations included).")); err != nil {
		return nil, err
	}
	// Trouble counters start at zero so dashboards and alerts see them before the first
	// retry or failure.
	t.retries.Add(context.Background(), 0)
	t.failures.Add(context.Background(), 0)
	return t, nil
}

func (t *telemetry) startSpan(ctx context.Context, r resolved) (context.Context, trace.Span) {
	prefix := "db.tx."
	if r.accessMode == "read only" {
		prefix = "db.tx.readonly."
	}
	return t.tracer.Start(ctx, prefix+r.traceName,
		trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(
			attribute.String("db.system", "postgresql"),
			attribute.String("db.name", t.dbName),
			attribute.String("db.tx.isolation", string(r.isolation)),
			attribute.String("db.tx.access_mode", string(r.accessMode)),
			attribute.String("tx.component", "txmanager"),
		))
}

type attrKey struct {
	method, isolation, accessMode string
	result, errorKind             string
	retryable                     bool
}

// metricAttrs returns the attribute set for r; result and kind are empty for the
// in-flight gauge.
func (t *telemetry) metricAttrs(r resolved, result string, kind ErrorKind, retryable bool) metric.MeasurementOption {
	key := attrKey{method: r.traceName, isolation: string(r.isolation), accessMode: string(r.accessMode), result: result, errorKind: string(kind), retryable: retryable}
	if opt, ok := t.attrSets.Load(key); ok {
		return opt.(metric.MeasurementOption)
	}
	attrs := []attribute.KeyValue{
		attribute.String("method", key.method),
		attribute.String("isolation", key.isolation),
		attribute.String("access_mode", key.accessMode),
	}
	if result != "" {
		attrs = append(attrs, attribute.String("result", result), attribute.Bool("retryable", retryable))
	}
	if kind != "" {
		attrs = append(attrs, attribute.String("error.kind", string(kind)))
	}
	opt, _ := t.attrSets.LoadOrStore(key, metric.WithAttributeSet(attribute.NewSet(attrs...)))
	return opt.(metric.MeasurementOption)
}

// finish records the outcome of one WithinTx call (all attempts) on its span and metrics.
func (t *telemetry) finish(ctx context.Context, span trace.Span, r resolved, started time.Time, attempts int, err error) {
	kind, state := outcome(err)
	retryable := kind == KindRetryable
	span.SetAttributes(
		attribute.Int("db.tx.attempts", attempts),
		attribute.Bool("db.tx.retryable", retryable),
	)
	if state != "" {
		span.SetAttributes(attribute.String("db.response.status_code", state), attribute.String("sql_state", state))
	}
	result := "committed"
	if err != nil {
		result = "failed"
		// As RecordError does, with the text logs carry: values withheld.
		span.AddEvent("exception", trace.WithAttributes(
			attribute.String("exception.type", fmt.Sprintf("%T", err)),
			attribute.String("exception.message", withheldText(err)),
		))
		span.SetStatus(codes.Error, string(kind))
		span.SetAttributes(attribute.String("error.kind", string(kind)))
		t.failures.Add(ctx, 1, t.metricAttrs(r, "", kind, false))
	}
	t.duration.Record(ctx, time.Since(started).Seconds(), t.metricAttrs(r, result, "", retryable))
	span.End()
}

// outcome extracts the class and SQLSTATE of err; an error the callback returned unchanged
// is an application failure ("other").
func outcome(err error) (ErrorKind, string) {
	if err == nil {
		return "", ""
	}
	var txErr *TxError
	if errors.As(err, &txErr) {
		return txErr.Kind, txErr.SQLState
	}
	return KindOther, SQLState(err)
}
