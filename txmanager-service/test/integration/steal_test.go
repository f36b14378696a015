package integration

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// stealMeter reports the share of CPU time the hypervisor took from this machine while a
// benchmark ran ("steal" in /proc/stat). On a shared VM it swings between 0 and 50%, which
// moves every throughput figure with it; reporting it lets a reader tell a slow run from a
// slow machine. Where /proc/stat is missing (not Linux) nothing is reported.
type stealMeter struct {
	steal, total uint64
	ok           bool
}

func startStealMeter() stealMeter {
	steal, total, ok := readCPUTimes()
	return stealMeter{steal: steal, total: total, ok: ok}
}

// report adds the steal percentage since start to the benchmark's metrics.
func (m stealMeter) report(b *testing.B) {
	steal, total, ok := readCPUTimes()
	if !m.ok || !ok || total <= m.total {
		return
	}
	b.ReportMetric(100*float64(steal-m.steal)/float64(total-m.total), "cpu-steal-%")
}

// readCPUTimes sums the aggregate "cpu" line of /proc/stat: user nice system idle iowait
// irq softirq steal (guest time is already inside user).
func readCPUTimes() (steal, total uint64, ok bool) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, false
	}
	line, _, _ := strings.Cut(string(data), "\n")
	fields := strings.Fields(line)
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0, 0, false
	}
	for i, f := range fields[1:9] {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return 0, 0, false
		}
		total += v
		if i == 7 {
			steal = v
		}
	}
	return steal, total, true
}

func TestReadCPUTimes(t *testing.T) {
	_, statErr := os.Stat("/proc/stat")
	steal, total, ok := readCPUTimes()
	if statErr != nil {
		if ok {
			t.Fatalf("readCPUTimes() reported times without /proc/stat")
		}
		return
	}
	if !ok || total == 0 || steal > total {
		t.Fatalf("readCPUTimes() = %d, %d, %t: want a positive total at least the steal", steal, total, ok)
	}
}
