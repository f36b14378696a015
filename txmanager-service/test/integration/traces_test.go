package integration

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// otlpCollector receives traces over OTLP/gRPC on loopback, as an OpenTelemetry Collector
// would, and keeps every span it is sent.
type otlpCollector struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (c *otlpCollector) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, resource := range req.GetResourceSpans() {
		for _, scope := range resource.GetScopeSpans() {
			c.spans = append(c.spans, scope.GetSpans()...)
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func (c *otlpCollector) received() []*tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*tracepb.Span(nil), c.spans...)
}

func startOTLPCollector(t *testing.T) (*otlpCollector, string) {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	collector := &otlpCollector{}
	server := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(server, collector)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = server.Serve(listener)
	}()
	t.Cleanup(func() {
		server.Stop()
		<-served
	})
	return collector, listener.Addr().String()
}

// Issue 6: with an OTLP endpoint configured, a create -> confirm cycle exports the request's
// server span (continuing the caller's traceparent), the writer batch linked to that request,
// the batch's database transaction, and chain RPC spans; the log lines about the transaction
// carry trace ids of exported traces.
func TestTracesAreExportedOverOTLP(t *testing.T) {
	t.Parallel()
	collector, endpoint := startOTLPCollector(t)
	logs := &testsupport.LogBuffer{}
	s := startService(t, serviceOptions{fastPipeline: true, logs: logs, configure: func(bc *conf.Bootstrap) {
		bc.Observability.OTLPEndpoint = endpoint
		bc.Observability.OTLPInsecure = true
		bc.Observability.SampleRatio = 1
		bc.Chain.Embedded.BlockInterval = conf.Duration(250 * time.Millisecond)
	}})
	const callerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	created := s.doAs(t, http.MethodPost, "/api/v1/tx",
		[]byte(`{"signer":"`+devAddress(t, 0)+`","to":"`+devAddress(t, 1)+`","value":"1","gasLimit":21000}`),
		"traceparent", "00-"+callerTrace+"-00f067aa0ba902b7-01")
	if created.status != http.StatusAccepted {
		t.Fatalf("create: %d %s", created.status, created.raw)
	}
	txID, _ := created.tx()["txId"].(string)
	waitFor(t, 30*time.Second, "confirmed", func() bool { return s.tx(t, txID).state == "CONFIRMED" })
	s.stop(t) // flushes the span batcher

	spans := collector.received()
	exportedTraces := map[string]bool{}
	spanByID := map[string]*tracepb.Span{}
	for _, span := range spans {
		exportedTraces[hex.EncodeToString(span.GetTraceId())] = true
		spanByID[hex.EncodeToString(span.GetSpanId())] = span
	}
	var serverSpan, batchSpan, batchTx, chainRPC bool
	for _, span := range spans {
		traceID := hex.EncodeToString(span.GetTraceId())
		switch {
		case span.GetKind() == tracepb.Span_SPAN_KIND_SERVER && traceID == callerTrace:
			serverSpan = true
		case span.GetName() == "writer.batch":
			for _, link := range span.GetLinks() {
				if hex.EncodeToString(link.GetTraceId()) == callerTrace {
					batchSpan = true
				}
			}
		case span.GetName() == "db.tx.writer.batch":
			parent := spanByID[hex.EncodeToString(span.GetParentSpanId())]
			batchTx = batchTx || (parent != nil && parent.GetName() == "writer.batch")
		case strings.HasPrefix(span.GetName(), "chain.rpc "):
			chainRPC = true
		}
	}
	checks := []struct {
		what string
		ok   bool
	}{
		{"an HTTP server span in the caller's trace " + callerTrace, serverSpan},
		{"a writer.batch span linked to the caller's trace", batchSpan},
		{"a db.tx.writer.batch span inside a writer.batch span", batchTx},
		{"a chain.rpc span", chainRPC},
	}
	for _, c := range checks {
		if !c.ok {
			t.Errorf("the collector received %d spans but not %s", len(spans), c.what)
		}
	}

	correlated := 0
	lines := bufio.NewScanner(strings.NewReader(logs.String()))
	lines.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for lines.Scan() {
		var entry map[string]any
		if json.Unmarshal(lines.Bytes(), &entry) != nil || (entry["tx_id"] != txID && entry["first_tx_id"] != txID) {
			continue
		}
		traceID, _ := entry["trace_id"].(string)
		if traceID == "" {
			continue
		}
		if !exportedTraces[traceID] {
			t.Errorf("log line %q carries trace_id %s, which the collector never received", entry["msg"], traceID)
		}
		correlated++
	}
	if correlated == 0 {
		t.Errorf("no log line about tx %s carries a trace_id", txID)
	}
}
