package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"net"
	"strings"
	"testing"

	"github.com/go-kratos/kratos/v2/log"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// Each log line is one JSON object whose values read as people wrote them: errors and
// Stringers as their text, a key without a value marked, and lines below the level dropped.
func TestJSONLoggerWritesOneObjectPerLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		level   log.Level
		keyvals []any
		// want are fields the line must carry; nil: no line at all.
		want map[string]any
		// absent are keys the line must not carry.
		absent []string
	}{
		{name: "below the minimum level", level: log.LevelDebug, keyvals: []any{"msg", "noise"}},
		{name: "plain values", level: log.LevelInfo, keyvals: []any{"msg", "started", "workers", 4},
			want: map[string]any{"level": "INFO", "msg": "started", "workers": float64(4)}},
		{name: "an error as its message", level: log.LevelError, keyvals: []any{"msg", "failed", "error", errors.New("connection refused")},
			want: map[string]any{"level": "ERROR", "error": "connection refused"}},
		{name: "a Stringer as its text", level: log.LevelWarn, keyvals: []any{"addr", net.IPv4(10, 0, 0, 1)},
			want: map[string]any{"level": "WARN", "addr": "10.0.0.1"}},
		{name: "a key without a value", level: log.LevelInfo, keyvals: []any{"msg", "odd", "dangling"},
			want: map[string]any{"dangling": "(missing)"}},
		{name: "empty trace ids outside a trace", level: log.LevelInfo, keyvals: []any{"msg", "x", "trace_id", "", "span_id", ""},
			want: map[string]any{"msg": "x"}, absent: []string{"trace_id", "span_id"}},
		{name: "an unencodable value", level: log.LevelInfo, keyvals: []any{"msg", "x", "ratio", math.Inf(1)},
			want: map[string]any{"level": "ERROR", "msg": "unencodable log entry"}, absent: []string{"ratio"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			if err := telemetry.NewJSONLogger(&out, log.LevelInfo).Log(tt.level, tt.keyvals...); err != nil {
				t.Fatalf("Log: %v", err)
			}
			if tt.want == nil {
				if out.Len() != 0 {
					t.Fatalf("logged %q below the minimum level", out.String())
				}
				return
			}
			if strings.Count(out.String(), "\n") != 1 || !strings.HasSuffix(out.String(), "\n") {
				t.Fatalf("output %q is not one line", out.String())
			}
			var line map[string]any
			if err := json.Unmarshal(out.Bytes(), &line); err != nil {
				t.Fatalf("line %q is not JSON: %v", out.String(), err)
			}
			if _, ok := line["ts"].(string); !ok {
				t.Errorf("line %v has no timestamp", line)
			}
			for k, v := range tt.want {
				if line[k] != v {
					t.Errorf("%s = %v, want %v (line %v)", k, line[k], v, line)
				}
			}
			for _, k := range tt.absent {
				if _, ok := line[k]; ok {
					t.Errorf("line carries %s: %v", k, line)
				}
			}
		})
	}
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errBroken }

var errBroken = errors.New("broken writer")

// A sink that fails is reported to the caller, not swallowed.
func TestJSONLoggerReportsAFailingSink(t *testing.T) {
	t.Parallel()
	if err := telemetry.NewJSONLogger(failingWriter{}, log.LevelInfo).Log(log.LevelInfo, "msg", "x"); !errors.Is(err, errBroken) {
		t.Fatalf("Log to a failing sink: %v, want its error", err)
	}
}

// The node logger stamps every line with the service and node, and inside a traced
// operation with its trace and span ids, so a log line leads to its trace.
func TestNodeLoggerStampsNodeAndTrace(t *testing.T) {
	t.Parallel()
	tp := sdktrace.NewTracerProvider()
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	ctx, span := tp.Tracer("test").Start(context.Background(), "op")
	defer span.End()
	tests := []struct {
		name      string
		ctx       context.Context
		wantTrace string
	}{
		{"outside a trace", context.Background(), ""},
		{"inside a trace", ctx, span.SpanContext().TraceID().String()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			logger := telemetry.NewNodeLogger(telemetry.NewJSONLogger(&out, log.LevelInfo), "node-7")
			log.NewHelper(logger).WithContext(tt.ctx).Infow("msg", "hello")
			var line map[string]any
			if err := json.Unmarshal(out.Bytes(), &line); err != nil {
				t.Fatalf("line %q: %v", out.String(), err)
			}
			if line["service"] != "txmanager" || line["node_id"] != "node-7" {
				t.Errorf("line %v lacks service and node", line)
			}
			got, has := line["trace_id"]
			switch {
			case tt.wantTrace == "" && has:
				t.Errorf("trace_id %v outside a trace", got)
			case tt.wantTrace != "" && got != tt.wantTrace:
				t.Errorf("trace_id %v, want %s", got, tt.wantTrace)
			}
		})
	}
}
