package telemetry

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/go-kratos/kratos/v2/log"
	"github.com/go-kratos/kratos/v2/middleware/tracing"
)

// JSONLogger writes one JSON object per line: {"ts":..., "level":..., key: value, ...}.
type JSONLogger struct {
	mu  sync.Mutex
	out io.Writer
	min log.Level
}

// NewJSONLogger logs at min level and above to out.
func NewJSONLogger(out io.Writer, min log.Level) *JSONLogger {
	return &JSONLogger{out: out, min: min}
}

// Log implements log.Logger.
func (l *JSONLogger) Log(level log.Level, keyvals ...any) error {
	if level < l.min {
		return nil
	}
	entry := make(map[string]any, len(keyvals)/2+2)
	entry["ts"] = time.Now().UTC().Format(time.RFC3339Nano)
	entry["level"] = level.String()
	for i := 0; i < len(keyvals); i += 2 {
		key := fmt.Sprint(keyvals[i])
		var value any = "(missing)"
		if i+1 < len(keyvals) {
			value = keyvals[i+1]
		}
		switch v := value.(type) {
		case error:
			value = v.Error()
		case fmt.Stringer:
			value = v.String()
		}
		if value == "" && (key == "trace_id" || key == "span_id") {
			continue // outside a traced operation there is nothing to correlate
		}
		entry[key] = value
	}
	line, err := json.Marshal(entry)
	if err != nil {
		line, _ = json.Marshal(map[string]any{"ts": entry["ts"], "level": "ERROR", "msg": "unencodable log entry", "error": err.Error()})
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	_, err = l.out.Write(append(line, '\n'))
	return err
}

// NewNodeLogger stamps every line with the service, the node, and the trace and span of the
// operation being logged, so a log line leads to its trace.
func NewNodeLogger(base log.Logger, nodeID string) log.Logger {
	return log.With(base, "service", "txmanager", "node_id", nodeID, "trace_id", tracing.TraceID(), "span_id", tracing.SpanID())
}
