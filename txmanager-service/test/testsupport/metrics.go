package testsupport

import (
	"context"
	"testing"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// RecordedMetrics returns the service's instruments on a reader of the test's own: a test
// collects from it what the component under test recorded or observed.
func RecordedMetrics(t testing.TB) (*telemetry.Metrics, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
	metrics, err := telemetry.NewMetrics(provider)
	if err != nil {
		t.Fatal(err)
	}
	return metrics, reader
}
