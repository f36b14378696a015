package diskprobe

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestProbeTimesFlushes(t *testing.T) {
	dir := t.TempDir()
	p, err := Start(dir, time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	s, ok := p.Finish()
	if !ok || s.Flushes < 2 {
		t.Fatalf("%d flushes timed in 50ms at one a millisecond, want several", s.Flushes)
	}
	if s.Interval != time.Millisecond {
		t.Fatalf("summary says a flush every %s, the probe ran every 1ms", s.Interval)
	}
	if text := s.String(); !strings.Contains(text, "every 1ms") || !strings.Contains(text, "slowest "+s.Max.Round(10*time.Microsecond).String()) {
		t.Fatalf("summary reads %q: want the interval and the slowest flush", text)
	}
	if s.P99 <= 0 || s.Max < s.P99 {
		t.Fatalf("p99 %s, slowest %s: want positive, slowest not below p99", s.P99, s.Max)
	}
	if again, ok := p.Finish(); !ok || again != s {
		t.Fatalf("finished again: %+v, want %+v", again, s)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "txm-disk-probe-*")); len(left) > 0 {
		t.Fatalf("probe left %v behind", left)
	}
}

func TestNoProbeNoSummary(t *testing.T) {
	var p *Probe
	if s, ok := p.Finish(); ok {
		t.Fatalf("a probe that never ran summarised %+v", s)
	}
}

func TestStartFailsWithoutItsDirectory(t *testing.T) {
	if _, err := Start(filepath.Join(t.TempDir(), "missing"), time.Millisecond); err == nil {
		t.Fatal("started a probe in a directory that does not exist")
	}
}
