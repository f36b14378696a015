package server

import (
	"context"
	"errors"
	"net/http"
	"testing"

	kratoserrors "github.com/go-kratos/kratos/v2/errors"
	"github.com/go-kratos/kratos/v2/transport"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// fakeTransport is a gRPC server transport carrying the caller's headers.
type fakeTransport struct{ header http.Header }

func (fakeTransport) Kind() transport.Kind              { return transport.KindGRPC }
func (fakeTransport) Endpoint() string                  { return "grpc://127.0.0.1:9000" }
func (fakeTransport) Operation() string                 { return "/txmanager.v1.TxService/CreateTx" }
func (t fakeTransport) RequestHeader() transport.Header { return headerCarrier(t.header) }
func (fakeTransport) ReplyHeader() transport.Header     { return headerCarrier(http.Header{}) }

type headerCarrier http.Header

func (h headerCarrier) Get(key string) string { return http.Header(h).Get(key) }
func (h headerCarrier) Set(key, value string) { http.Header(h).Set(key, value) }
func (h headerCarrier) Add(key, value string) { http.Header(h).Add(key, value) }
func (h headerCarrier) Keys() []string {
	var k []string
	for key := range h {
		k = append(k, key)
	}
	return k
}
func (h headerCarrier) Values(key string) []string { return http.Header(h).Values(key) }

// The server span continues the caller's trace and is described (operation, message sizes,
// status) when it is recorded; when it is not, the handler still runs inside a span with a
// trace id (for logs and forwarding) and nothing is recorded.
func TestServerTracingDescribesOnlyRecordedSpans(t *testing.T) {
	const callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	tests := []struct {
		name        string
		sampler     sdktrace.Sampler
		traceparent string
		handlerErr  error
		wantSpans   int
		wantTrace   string // "" any valid trace id
		wantStatus  codes.Code
	}{
		{name: "sampled caller", sampler: sdktrace.ParentBased(sdktrace.NeverSample()), traceparent: "00-" + callerTrace + "-00f067aa0ba902b7-01",
			wantSpans: 1, wantTrace: callerTrace, wantStatus: codes.Ok},
		{name: "unsampled caller", sampler: sdktrace.ParentBased(sdktrace.NeverSample()), traceparent: "00-" + callerTrace + "-00f067aa0ba902b7-00",
			wantSpans: 0, wantTrace: callerTrace},
		{name: "no caller trace, nothing sampled", sampler: sdktrace.ParentBased(sdktrace.NeverSample()), wantSpans: 0},
		{name: "every trace sampled", sampler: sdktrace.AlwaysSample(), wantSpans: 1, wantStatus: codes.Ok},
		{name: "failed request", sampler: sdktrace.AlwaysSample(), handlerErr: kratoserrors.BadRequest("INVALID_INTENT", "no"),
			wantSpans: 1, wantStatus: codes.Error},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recorder := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(tt.sampler), sdktrace.WithSpanProcessor(recorder))
			header := http.Header{}
			if tt.traceparent != "" {
				header.Set("traceparent", tt.traceparent)
			}
			var seen trace.SpanContext
			handler := serverTracing(tp, telemetry.Propagator())(func(ctx context.Context, _ any) (any, error) {
				seen = trace.SpanContextFromContext(ctx)
				return wrapperspb.String("reply"), tt.handlerErr
			})
			ctx := transport.NewServerContext(context.Background(), fakeTransport{header: header})
			if _, err := handler(ctx, wrapperspb.String("request")); !errors.Is(err, tt.handlerErr) {
				t.Fatalf("handler error %v, want %v", err, tt.handlerErr)
			}
			if !seen.HasTraceID() || (tt.wantTrace != "" && seen.TraceID().String() != tt.wantTrace) {
				t.Errorf("handler ran in trace %s, want %q (any valid one if empty)", seen.TraceID(), tt.wantTrace)
			}
			spans := recorder.Ended()
			if len(spans) != tt.wantSpans {
				t.Fatalf("%d spans recorded, want %d", len(spans), tt.wantSpans)
			}
			if tt.wantSpans == 0 {
				return
			}
			span := spans[0]
			if span.SpanKind() != trace.SpanKindServer || span.Status().Code != tt.wantStatus {
				t.Errorf("span kind %v status %v, want server %v", span.SpanKind(), span.Status().Code, tt.wantStatus)
			}
			attrs := map[attribute.Key]attribute.Value{}
			for _, a := range span.Attributes() {
				attrs[a.Key] = a.Value
			}
			for key, want := range map[attribute.Key]string{
				"rpc.system": "grpc", "rpc.service": "txmanager.v1.TxService", "rpc.method": "CreateTx",
			} {
				if got := attrs[key].AsString(); got != want {
					t.Errorf("attribute %s = %q, want %q", key, got, want)
				}
			}
			for _, key := range []attribute.Key{"recv_msg.size", "send_msg.size"} {
				if attrs[key].AsInt64() <= 0 {
					t.Errorf("attribute %s = %v, want the message's size", key, attrs[key])
				}
			}
		})
	}
}
