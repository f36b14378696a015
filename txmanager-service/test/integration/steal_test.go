package integration

import (
	"testing"

	"github.com/bionicotaku/txmanager-service/test/procstat"
)

// stealMeter reports the share of CPU time the hypervisor took from this machine while a
// benchmark ran ("steal" in /proc/stat). On a shared VM it swings between 0 and 50%, which
// moves every throughput figure with it; reporting it lets a reader tell a slow run from a
// slow machine. Where /proc/stat is missing (not Linux) nothing is reported.
type stealMeter struct {
	start procstat.MachineTimes
	ok    bool
}

func startStealMeter() stealMeter {
	start, ok := procstat.Machine()
	return stealMeter{start: start, ok: ok}
}

// report adds the steal percentage since start to the benchmark's metrics.
func (m stealMeter) report(b *testing.B) {
	now, ok := procstat.Machine()
	if !m.ok || !ok || now.Total <= m.start.Total {
		return
	}
	b.ReportMetric(100*float64(now.Steal-m.start.Steal)/float64(now.Total-m.start.Total), "cpu-steal-%")
}
