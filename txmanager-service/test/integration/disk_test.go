package integration

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/test/diskprobe"
)

// startDiskMeter times flushes to the database's disk while a benchmark runs (package
// diskprobe says why); nil when the database is on another machine.
func startDiskMeter(tb testing.TB, pool *pgxpool.Pool) *diskprobe.Probe {
	tb.Helper()
	probe, err := diskprobe.ForDatabase(context.Background(), pool)
	if err != nil {
		tb.Logf("disk probe skipped: %v", err)
	}
	// A benchmark that fails before reporting leaves no probe running.
	tb.Cleanup(func() { _, _ = probe.Finish() })
	return probe
}

// reportDisk adds the probe's p99 and slowest flush to the benchmark's metrics.
func reportDisk(b *testing.B, probe *diskprobe.Probe) {
	if s, ok := probe.Finish(); ok {
		b.ReportMetric(float64(s.P99.Microseconds())/1000, "disk-flush-p99-ms")
		b.ReportMetric(float64(s.Max.Microseconds())/1000, "disk-flush-max-ms")
	}
}
