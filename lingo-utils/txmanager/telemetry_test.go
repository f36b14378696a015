package txmanager_test

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/bionicotaku/lingo-utils/txmanager"
)

func TestSpansAndMetricsAreRecorded(t *testing.T) {
	t.Parallel()
	f := newFixture(t, txmanager.Config{})
	ctx := context.Background()

	if err := f.manager.WithinTx(ctx, txmanager.DefaultOptions().WithTraceName("items.create"), insertItem("one")); err != nil {
		t.Fatal(err)
	}
	_ = f.manager.WithinTx(ctx, txmanager.DefaultOptions().WithTraceName("items.create"), insertItem("one")) // 23505
	attempts := 0
	if err := f.manager.WithinTx(ctx, txmanager.DefaultOptions().WithTraceName("items.retry").WithRetries(2), func(ctx context.Context, s txmanager.Session) error {
		attempts++
		if attempts == 1 {
			_, err := s.DB().Exec(ctx, "DO $$ BEGIN RAISE EXCEPTION 'again' USING ERRCODE = '40001'; END $$")
			return err
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := f.manager.WithinReadOnlyTx(ctx, txmanager.ReadOnlyOptions().WithTraceName("items.list"), func(context.Context, txmanager.Session) error { return nil }); err != nil {
		t.Fatal(err)
	}

	spans := f.spans.Ended()
	if len(spans) != 4 {
		t.Fatalf("ended spans = %d, want 4", len(spans))
	}
	wantNames := []string{"db.tx.items.create", "db.tx.items.create", "db.tx.items.retry", "db.tx.readonly.items.list"}
	for i, span := range spans {
		if span.Name() != wantNames[i] {
			t.Errorf("span %d name = %q, want %q", i, span.Name(), wantNames[i])
		}
		attrs := map[attribute.Key]attribute.Value{}
		for _, kv := range span.Attributes() {
			attrs[kv.Key] = kv.Value
		}
		if attrs["db.system"].AsString() != "postgresql" || attrs["tx.component"].AsString() != "txmanager" {
			t.Errorf("span %d lacks db.system/tx.component: %v", i, attrs)
		}
		if _, ok := attrs["db.tx.isolation"]; !ok {
			t.Errorf("span %d lacks db.tx.isolation", i)
		}
	}
	failed := spans[1]
	if failed.Status().Code != codes.Error {
		t.Errorf("failed span status = %v, want Error", failed.Status())
	}
	if got := attrOf(failed.Attributes(), "sql_state"); got != "23505" {
		t.Errorf("failed span sql_state = %q, want 23505", got)
	}
	if got := attrOf(spans[2].Attributes(), "db.tx.attempts"); got != "2" {
		t.Errorf("retried span attempts = %q, want 2", got)
	}

	metrics := f.collect(t)
	for _, name := range []string{txmanager.MetricDuration, txmanager.MetricActive, txmanager.MetricRetries, txmanager.MetricFailures} {
		if _, ok := metrics[name]; !ok {
			t.Errorf("metric %s not recorded", name)
		}
	}
	hist, ok := metrics[txmanager.MetricDuration].(metricdata.Histogram[float64])
	if !ok {
		t.Fatalf("%s is %T, want a float64 histogram", txmanager.MetricDuration, metrics[txmanager.MetricDuration])
	}
	var observations uint64
	for _, dp := range hist.DataPoints {
		observations += dp.Count
	}
	if observations != 4 {
		t.Errorf("duration observations = %d, want 4", observations)
	}
	if got := sumOf(metrics[txmanager.MetricRetries]); got != 1 {
		t.Errorf("retries = %d, want 1", got)
	}
	if got := sumOf(metrics[txmanager.MetricFailures]); got != 1 {
		t.Errorf("failures = %d, want 1", got)
	}
	if got := sumOf(metrics[txmanager.MetricActive]); got != 0 {
		t.Errorf("active = %d, want 0", got)
	}
}

func TestNoTelemetryProviderIsNoop(t *testing.T) {
	t.Parallel()
	f := newFixture(t, txmanager.Config{DisableMetrics: true, DisableTracing: true})
	// The fixture's manager was built with SDK providers; disabling must override them.
	component, err := txmanager.NewComponentWithDependencies(txmanager.Config{DisableMetrics: true, DisableTracing: true}, f.pool, txmanager.Dependencies{})
	if err != nil {
		t.Fatal(err)
	}
	if err := component.Manager.WithinTx(context.Background(), txmanager.DefaultOptions(), insertItem("quiet")); err != nil {
		t.Fatal(err)
	}
	if err := f.manager.WithinTx(context.Background(), txmanager.DefaultOptions(), insertItem("quiet2")); err != nil {
		t.Fatal(err)
	}
	if n := len(f.spans.Ended()); n != 0 {
		t.Fatalf("tracing disabled but %d spans recorded", n)
	}
	if metrics := f.collect(t); len(metrics) != 0 {
		t.Fatalf("metrics disabled but recorded: %v", metrics)
	}
}

func attrOf(attrs []attribute.KeyValue, key attribute.Key) string {
	for _, kv := range attrs {
		if kv.Key == key {
			return kv.Value.String()
		}
	}
	return ""
}
