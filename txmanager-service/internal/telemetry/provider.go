package telemetry

import (
	"context"
	"fmt"
	"net/http"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/wire"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// ProviderSet provides the service's telemetry: an OpenTelemetry MeterProvider exported for
// Prometheus, the service's instruments on it, and the collaborators the transaction
// library records through. Each service instance owns its own providers (nothing global),
// so several instances in one process keep separate figures.
var ProviderSet = wire.NewSet(NewPrometheus, NewMetricsFromPrometheus, NewTxManagerDependencies)

// Prometheus is the metrics pipeline: OTel instruments -> Prometheus registry -> /metrics.
type Prometheus struct {
	Provider *sdkmetric.MeterProvider
	Handler  http.Handler
	Tracer   trace.TracerProvider
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
		Tracer:   tracenoop.NewTracerProvider(),
	}
	return p, func() { _ = provider.Shutdown(context.Background()) }, nil
}

// NewMetricsFromPrometheus creates the service's instruments on the exported provider.
func NewMetricsFromPrometheus(p *Prometheus) (*Metrics, error) { return NewMetrics(p.Provider) }

// NewTxManagerDependencies hands the transaction library the same providers and logger.
func NewTxManagerDependencies(p *Prometheus, logger log.Logger) txmanager.Dependencies {
	return txmanager.Dependencies{Logger: logger, MeterProvider: metric.MeterProvider(p.Provider), TracerProvider: p.Tracer}
}
