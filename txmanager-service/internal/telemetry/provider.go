package telemetry

import (
	"github.com/google/wire"
	"go.opentelemetry.io/otel"
)

// ProviderSet provides the service's metrics on the global MeterProvider (installed by
// main before wiring; the no-op provider until then).
var ProviderSet = wire.NewSet(NewGlobalMetrics)

// NewGlobalMetrics creates the instruments on otel.GetMeterProvider().
func NewGlobalMetrics() (*Metrics, error) { return NewMetrics(otel.GetMeterProvider()) }
