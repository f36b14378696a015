package telemetry

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/wire"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/bionicotaku/txmanager-service/internal/conf"
)

// ProviderSet provides the service's telemetry: an OpenTelemetry MeterProvider exported for
// Prometheus, the service's instruments on it, and the collaborators the transaction
// library records through. Each service instance owns its own providers (nothing global),
// so several instances in one process keep separate figures.
var ProviderSet = wire.NewSet(NewPrometheus, NewTracerProvider, NewMetricsFromPrometheus, NewTxManagerDependencies)

// Prometheus is the metrics pipeline: OTel instruments -> Prometheus registry -> /metrics.
type Prometheus struct {
	Provider *sdkmetric.MeterProvider
	Handler  http.Handler
}

// NewPrometheus builds a registry with the Go runtime and process collectors and an OTel
// MeterProvider that exports into it.
func NewPrometheus() (*Prometheus, func(), error) {
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	p := &Prometheus{
		Provider: provider,
		Handler:  promhttp.HandlerFor(registry, promhttp.HandlerOpts{Registry: registry}),
	}
	return p, func() { _ = provider.Shutdown(context.Background()) }, nil
}

// NewMetricsFromPrometheus creates the service's instruments on the exported provider.
func NewMetricsFromPrometheus(p *Prometheus, tp trace.TracerProvider) (*Metrics, error) {
	m, err := NewMetrics(p.Provider)
	if err != nil {
		return nil, err
	}
	m.Tracer = tp.Tracer("github.com/bionicotaku/txmanager-service")
	return m, nil
}

// NewTxManagerDependencies hands the transaction library the same providers and logger.
func NewTxManagerDependencies(p *Prometheus, tp trace.TracerProvider, logger log.Logger) txmanager.Dependencies {
	return txmanager.Dependencies{Logger: logger, MeterProvider: metric.MeterProvider(p.Provider), TracerProvider: tp}
}

// NewTracerProvider records spans for HTTP/gRPC requests, writer batches, database
// transactions and chain calls, and exports them over OTLP when an endpoint is set.
// Without one, spans are still made so logs carry trace ids (and a caller's trace id is
// kept), but only those of a caller's sampled trace are recorded, so that a peer that does
// export learns the trace is sampled: recording every request's spans for nothing costs the
// create path several percent of its CPU.
func NewTracerProvider(node conf.Node, c conf.Observability) (trace.TracerProvider, func(), error) {
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		semconv.ServiceName("txmanager-service"), attribute.String("service.instance.id", node.ID)))
	if err != nil {
		return nil, nil, err
	}
	sampler := sdktrace.ParentBased(sdktrace.NeverSample())
	if c.OTLPEndpoint != "" {
		sampler = sdktrace.ParentBased(sdktrace.TraceIDRatioBased(c.SampleRatio))
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithResource(res), sdktrace.WithSampler(sampler)}
	if endpoint := c.OTLPEndpoint; endpoint != "" {
		clientOpts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(endpoint)}
		if c.OTLPInsecure {
			clientOpts = append(clientOpts, otlptracegrpc.WithInsecure())
		}
		// The exporter connects lazily and retries in the background: an absent collector
		// costs dropped spans, never the service.
		exporter, err := otlptracegrpc.New(context.Background(), clientOpts...)
		if err != nil {
			return nil, nil, fmt.Errorf("otlp trace exporter: %w", err)
		}
		opts = append(opts, sdktrace.WithBatcher(exporter))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	return tp, func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tp.Shutdown(ctx)
	}, nil
}

// Propagator carries trace context across HTTP, gRPC and node-to-node forwarding.
func Propagator() propagation.TextMapPropagator {
	return propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
}
