package telemetry

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/bionicotaku/txmanager-service/internal/conf"
)

// Spans are recorded only where something exports them or a caller's trace is sampled, and
// carry trace ids (for the logs and the peers) either way; a caller's trace id is kept.
func TestTracerProviderRecordsOnlyWhenExporting(t *testing.T) {
	callerTrace, err := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	if err != nil {
		t.Fatal(err)
	}
	caller := trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: callerTrace, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled, Remote: true,
	}))
	cases := []struct {
		name          string
		otlpEndpoint  string
		sampleRatio   float64
		parent        context.Context
		wantRecording bool
		wantTraceID   trace.TraceID
	}{
		{name: "no exporter, new trace", parent: context.Background(), sampleRatio: 1},
		{name: "no exporter, caller's sampled trace (passed on as sampled)", parent: caller, sampleRatio: 1, wantRecording: true, wantTraceID: callerTrace},
		{name: "exporter, ratio 1", otlpEndpoint: "127.0.0.1:4317", parent: context.Background(), sampleRatio: 1, wantRecording: true},
		{name: "exporter, ratio 0, new trace", otlpEndpoint: "127.0.0.1:4317", parent: context.Background()},
		{name: "exporter, ratio 0, caller's sampled trace", otlpEndpoint: "127.0.0.1:4317", parent: caller, wantRecording: true, wantTraceID: callerTrace},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			observability := conf.Observability{OTLPEndpoint: tc.otlpEndpoint, OTLPInsecure: true, SampleRatio: tc.sampleRatio}
			provider, shutdown, err := NewTracerProvider(conf.Node{ID: "test"}, observability)
			if err != nil {
				t.Fatal(err)
			}
			_, span := provider.Tracer("test").Start(tc.parent, "request")
			// Ended after the provider shut down, the span is never exported: no collector
			// listens here, and an export would wait out the shutdown's deadline.
			defer span.End()
			defer shutdown()
			if got := span.IsRecording(); got != tc.wantRecording {
				t.Errorf("recording = %v, want %v", got, tc.wantRecording)
			}
			sc := span.SpanContext()
			if !sc.IsValid() {
				t.Fatalf("span context %v is not valid: logs would carry no trace id", sc)
			}
			if tc.wantTraceID.IsValid() && sc.TraceID() != tc.wantTraceID {
				t.Errorf("trace id %s, want the caller's %s", sc.TraceID(), tc.wantTraceID)
			}
		})
	}
}
