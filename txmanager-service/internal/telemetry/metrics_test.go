package telemetry_test

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// newMetrics returns the service's instruments on an SDK provider whose manual reader lets a
// test read back what was recorded.
func newMetrics(t *testing.T) (*telemetry.Metrics, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
	m, err := telemetry.NewMetrics(provider)
	if err != nil {
		t.Fatal(err)
	}
	return m, reader
}

// point is one data point as a test names it: the instrument and its attributes.
type point struct {
	value      float64
	histCount  uint64
	histSum    float64
	attributes attribute.Set
}

// collect reads every data point of the instrument name, keyed by its attributes in a
// stable text form ("chain_id=7,result=created").
func collect(t *testing.T, reader *sdkmetric.ManualReader, name string) map[string]point {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]point{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range data.DataPoints {
					out[attrKey(dp.Attributes)] = point{value: float64(dp.Value), attributes: dp.Attributes}
				}
			case metricdata.Gauge[int64]:
				for _, dp := range data.DataPoints {
					out[attrKey(dp.Attributes)] = point{value: float64(dp.Value), attributes: dp.Attributes}
				}
			case metricdata.Gauge[float64]:
				for _, dp := range data.DataPoints {
					out[attrKey(dp.Attributes)] = point{value: dp.Value, attributes: dp.Attributes}
				}
			case metricdata.Histogram[int64]:
				for _, dp := range data.DataPoints {
					out[attrKey(dp.Attributes)] = point{histCount: dp.Count, histSum: float64(dp.Sum), attributes: dp.Attributes}
				}
			case metricdata.Histogram[float64]:
				for _, dp := range data.DataPoints {
					out[attrKey(dp.Attributes)] = point{histCount: dp.Count, histSum: dp.Sum, attributes: dp.Attributes}
				}
			default:
				t.Fatalf("%s: unexpected data %T", name, m.Data)
			}
		}
	}
	return out
}

func attrKey(s attribute.Set) string {
	parts := make([]string, 0, s.Len())
	for _, kv := range s.ToSlice() {
		parts = append(parts, string(kv.Key)+"="+kv.Value.String())
	}
	return strings.Join(parts, ",")
}

// Every recorder lands on the series operators alert on, with the chain's id and the
// labels the dashboards group by; a recorder wired to the wrong instrument or label fails
// its row.
func TestRecordersWriteTheirSeries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name   string
		record func(m *telemetry.Metrics)
		metric string
		// attrs is the series the measurement must land on; want its value (a counter's
		// total, or a histogram's sum).
		attrs string
		want  float64
	}{
		{"lease acquire", func(m *telemetry.Metrics) { m.LeaseAcquire(ctx, "acquired") }, telemetry.LeaseAcquireTotal, "chain_id=7,result=acquired", 1},
		{"fenced", func(m *telemetry.Metrics) { m.Fenced(ctx) }, telemetry.LeaseFencedTotal, "chain_id=7", 1},
		{"create count", func(m *telemetry.Metrics) { m.TxCreate(ctx, "created", 0.25) }, telemetry.TxCreateTotal, "chain_id=7,result=created", 1},
		{"create latency", func(m *telemetry.Metrics) { m.TxCreate(ctx, "created", 0.25) }, "tx_create_duration_seconds", "chain_id=7,result=created", 0.25},
		{"submit", func(m *telemetry.Metrics) { m.TxSubmit(ctx, "sent") }, telemetry.TxSubmitTotal, "chain_id=7,result=sent", 1},
		{"receipt check", func(m *telemetry.Metrics) { m.ReceiptCheck(ctx, "found") }, telemetry.ReceiptCheckTotal, "chain_id=7,result=found", 1},
		{"resubmit", func(m *telemetry.Metrics) { m.Resubmit(ctx, "submitted") }, telemetry.ResubmitTotal, "chain_id=7,result=submitted", 1},
		{"stuck", func(m *telemetry.Metrics) { m.Stuck(ctx, "cancel") }, telemetry.StuckTotal, "action=cancel,chain_id=7", 1},
		{"reorg", func(m *telemetry.Metrics) { m.Reorg(ctx) }, telemetry.ReorgTotal, "chain_id=7", 1},
		{"readiness", func(m *telemetry.Metrics) { m.ReadinessProbe(ctx, "ready") }, telemetry.ReadinessProbeTotal, "chain_id=7,result=ready", 1},
		{"rate limited", func(m *telemetry.Metrics) { m.RateLimited(ctx) }, telemetry.RateLimitedTotal, "chain_id=7", 1},
		{"reprice", func(m *telemetry.Metrics) { m.Reprice(ctx, "raised") }, telemetry.RepriceTotal, "chain_id=7,result=raised", 1},
		{"holes filled", func(m *telemetry.Metrics) { m.NonceHolesFilled(ctx, 3) }, telemetry.NonceHoleFilledTotal, "chain_id=7", 3},
		{"recovered", func(m *telemetry.Metrics) { m.Recovered(ctx, "adopted", 2) }, telemetry.RecoveredTxTotal, "chain_id=7,result=adopted", 2},
		{"policy denied", func(m *telemetry.Metrics) { m.PolicyDenied(ctx, "windowValue", "credential") }, telemetry.PolicyDeniedTotal, "chain_id=7,rule=windowValue,scope=credential", 1},
		{"quarantined", func(m *telemetry.Metrics) { m.Quarantined(ctx) }, telemetry.SignerQuarantineTotal, "chain_id=7", 1},
		{"recovery time", func(m *telemetry.Metrics) { m.RecoveryFinished(ctx, 90*time.Second) }, telemetry.SignerRecoverySeconds, "chain_id=7", 90},
		{"server changed", func(m *telemetry.Metrics) { m.DatabaseServerChanged(ctx) }, telemetry.DatabaseServerChanges, "chain_id=7", 1},
		{"nonce taken", func(m *telemetry.Metrics) { m.NonceTakenResolved(ctx, "foreign") }, telemetry.RecognisedTotal, "chain_id=7,result=foreign", 1},
		{"pruned", func(m *telemetry.Metrics) { m.Pruned(ctx, "attempt", 5) }, telemetry.RetentionPrunedTotal, "chain_id=7,kind=attempt", 5},
		{"writer batch", func(m *telemetry.Metrics) { m.WriterBatch(ctx, 16) }, "writer_batch_size", "chain_id=7", 16},
		{"writer phase", func(m *telemetry.Metrics) { m.WriterPhase(ctx, telemetry.PhaseCommit, 3*time.Millisecond) }, telemetry.WriterPhaseSeconds, "chain_id=7,phase=commit", 0.003},
		{"writer queue", func(m *telemetry.Metrics) { m.WriterPhase(ctx, telemetry.PhaseQueued, 250*time.Millisecond) }, telemetry.WriterPhaseSeconds, "chain_id=7,phase=queued", 0.25},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			m, reader := newMetrics(t)
			chain := m.ForChain(7)
			tt.record(chain)
			tt.record(chain) // twice: the cached attribute set of a result label is reused
			series := collect(t, reader, tt.metric)
			got, ok := series[tt.attrs]
			if !ok {
				t.Fatalf("%s has no series %q; it has %v", tt.metric, tt.attrs, keys(series))
			}
			value := got.value
			if got.histCount > 0 {
				if got.histCount != 2 {
					t.Errorf("%s{%s}: %d observations, want 2", tt.metric, tt.attrs, got.histCount)
				}
				value = got.histSum
			}
			if value != 2*tt.want {
				t.Errorf("%s{%s} = %v, want %v", tt.metric, tt.attrs, value, 2*tt.want)
			}
		})
	}
}

func keys(m map[string]point) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A chain's view starts the series that only count trouble at zero, so an alert on
// increase() sees them before the first incident; the process-wide instruments start only
// the process-wide ones, so no chain-less zero series sits beside the chains' own.
func TestChainViewStartsTroubleSeriesAtZero(t *testing.T) {
	t.Parallel()
	m, reader := newMetrics(t)
	_ = m.ForChain(1)
	_ = m.ForChain(2)
	tests := []struct {
		metric string
		want   []string
	}{
		{telemetry.LeaseFencedTotal, []string{"chain_id=1", "chain_id=2"}},
		{telemetry.StuckTotal, []string{"action=noop,chain_id=1", "action=noop,chain_id=2"}},
		{telemetry.ReorgTotal, []string{"chain_id=1", "chain_id=2"}},
		{telemetry.RepriceTotal, []string{"chain_id=1,result=at_cap", "chain_id=2,result=at_cap"}},
		{telemetry.NonceHoleFilledTotal, []string{"chain_id=1", "chain_id=2"}},
		{telemetry.SignerQuarantineTotal, []string{"chain_id=1", "chain_id=2"}},
		{telemetry.ResubmitTotal, []string{"chain_id=1,result=submitted", "chain_id=2,result=submitted"}},
		{telemetry.RecoveredTxTotal, []string{
			"chain_id=1,result=adopted", "chain_id=1,result=expired", "chain_id=1,result=recorded",
			"chain_id=2,result=adopted", "chain_id=2,result=expired", "chain_id=2,result=recorded",
		}},
		// Process-wide: one chain-less series each.
		{telemetry.RateLimitedTotal, []string{""}},
		{telemetry.DatabaseServerChanges, []string{""}},
	}
	for _, tt := range tests {
		t.Run(tt.metric, func(t *testing.T) {
			series := collect(t, reader, tt.metric)
			if len(series) != len(tt.want) {
				t.Fatalf("%s has series %v, want exactly %v", tt.metric, keys(series), tt.want)
			}
			for _, attrs := range tt.want {
				p, ok := series[attrs]
				if !ok || p.value != 0 {
					t.Errorf("%s{%s}: present=%t value=%v, want a zero series", tt.metric, attrs, ok, p.value)
				}
			}
		})
	}
}

// Gauges read their value from the owner's callback at collection time, and a chain's
// view adds its chain_id to what the callback reports.
func TestGaugesReadTheirOwnersAtCollection(t *testing.T) {
	t.Parallel()
	m, reader := newMetrics(t)
	depth := int64(3)
	if err := m.ForChain(9).RegisterGauge(telemetry.WriterQueueDepth, "queue depth", func(_ context.Context, record func(int64, ...attribute.KeyValue)) {
		record(depth, attribute.String("signer", "0xaa"))
	}); err != nil {
		t.Fatal(err)
	}
	if err := m.RegisterFloatGauge(telemetry.PendingOldestAgeSeconds, "oldest", func(_ context.Context, record func(float64, ...attribute.KeyValue)) {
		record(1.5)
	}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		before func()
		metric string
		attrs  string
		want   float64
	}{
		{"int gauge as registered", func() {}, telemetry.WriterQueueDepth, "chain_id=9,signer=0xaa", 3},
		{"int gauge follows its owner", func() { depth = 11 }, telemetry.WriterQueueDepth, "chain_id=9,signer=0xaa", 11},
		{"process-wide float gauge", func() {}, telemetry.PendingOldestAgeSeconds, "", 1.5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.before()
			series := collect(t, reader, tt.metric)
			if got, ok := series[tt.attrs]; !ok || got.value != tt.want {
				t.Fatalf("%s = %v (series %v), want {%s} %v", tt.metric, got.value, keys(series), tt.attrs, tt.want)
			}
		})
	}
}

// A chain's tracer stamps every span it starts with the chain's id, so a trace of one
// chain's pipeline is found by chain.
func TestChainTracerStampsTheChain(t *testing.T) {
	t.Parallel()
	recorder := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(recorder))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	m := telemetry.Noop()
	m.Tracer = tp.Tracer("test")
	_, span := m.ForChain(42).Tracer.Start(context.Background(), "writer.batch")
	span.End()
	ended := recorder.Ended()
	if len(ended) != 1 {
		t.Fatalf("%d spans, want 1", len(ended))
	}
	found := false
	for _, a := range ended[0].Attributes() {
		if a.Key == "chain_id" && a.Value.AsInt64() == 42 {
			found = true
		}
	}
	if !found {
		t.Fatalf("span attributes %v lack chain_id=42", ended[0].Attributes())
	}
}

// Noop (and a nil provider) records nothing and never fails a caller.
func TestNoopMetricsAcceptEveryCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fromNil, err := telemetry.NewMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, m := range map[string]*telemetry.Metrics{"Noop": telemetry.Noop(), "nil provider": fromNil} {
		t.Run(name, func(t *testing.T) {
			m.ForChain(1).TxCreate(ctx, "created", 0.1)
			m.Pruned(ctx, "transaction", 1)
			if err := m.RegisterGauge("g", "", func(context.Context, func(int64, ...attribute.KeyValue)) {}); err != nil {
				t.Errorf("RegisterGauge on a no-op provider: %v", err)
			}
			if m.Meter() == nil || m.Tracer == nil {
				t.Error("no-op metrics without a meter or tracer: callers would panic")
			}
		})
	}
}

// /metrics serves the instruments in Prometheus text with the runtime collectors beside
// them, and the transaction library records on the same provider.
func TestPrometheusServesTheInstruments(t *testing.T) {
	t.Parallel()
	p, cleanup, err := telemetry.NewPrometheus()
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	tp := tracenoop.NewTracerProvider()
	m, err := telemetry.NewMetricsFromPrometheus(p, tp)
	if err != nil {
		t.Fatal(err)
	}
	m.ForChain(5).TxCreate(context.Background(), "created", 0.01)
	deps := telemetry.NewTxManagerDependencies(p, tp, nil)
	if deps.MeterProvider == nil || deps.TracerProvider == nil {
		t.Fatalf("transaction library dependencies %+v lack the providers", deps)
	}

	rec := httptest.NewRecorder()
	p.Handler.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	tests := []struct{ name, want string }{
		{"service counter with labels", `tx_create_total{chain_id="5",result="created"} 1`},
		{"histogram", `tx_create_duration_seconds_count{chain_id="5",result="created"} 1`},
		{"zero series of the chain", `lease_fenced_total{chain_id="5"} 0`},
		{"help text", "# HELP tx_create_total Create requests by result"},
		{"go runtime collector", "go_goroutines "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(string(body), tt.want) {
				t.Errorf("/metrics lacks %q", tt.want)
			}
		})
	}
}

// The propagator carries both the W3C trace context and baggage across forwarding.
func TestPropagatorCarriesTraceContextAndBaggage(t *testing.T) {
	t.Parallel()
	fields := telemetry.Propagator().Fields()
	for _, want := range []string{"traceparent", "baggage"} {
		found := false
		for _, f := range fields {
			found = found || f == want
		}
		if !found {
			t.Errorf("propagator fields %v lack %q", fields, want)
		}
	}
}
