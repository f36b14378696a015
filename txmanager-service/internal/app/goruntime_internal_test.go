package app

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"

	"github.com/bionicotaku/txmanager-service/internal/conf"
)

func TestDecideGoRuntime(t *testing.T) {
	t.Parallel()
	const mib = 1 << 20
	tests := []struct {
		name      string
		cfg       conf.Runtime
		env       map[string]string
		container int64
		want      GoRuntime
	}{
		{
			name: "configuration, no container",
			cfg:  conf.Runtime{GCPercent: 400},
			want: GoRuntime{GCPercent: 400, GCPercentFrom: "runtime.gcPercent", MemoryLimit: math.MaxInt64, MemoryLimitFrom: "none"},
		},
		{
			name:      "90% of the container's limit",
			cfg:       conf.Runtime{GCPercent: 400},
			container: 1000 * mib,
			want:      GoRuntime{GCPercent: 400, GCPercentFrom: "runtime.gcPercent", MemoryLimit: 900 * mib, MemoryLimitFrom: "container limit"},
		},
		{
			name:      "a configured limit over the container's",
			cfg:       conf.Runtime{GCPercent: 200, MemoryLimitMiB: 700},
			container: 1000 * mib,
			want:      GoRuntime{GCPercent: 200, GCPercentFrom: "runtime.gcPercent", MemoryLimit: 700 * mib, MemoryLimitFrom: "runtime.memoryLimitMiB"},
		},
		{
			name:      "the environment wins",
			cfg:       conf.Runtime{GCPercent: 400, MemoryLimitMiB: 700},
			env:       map[string]string{"GOGC": "100", "GOMEMLIMIT": "512MiB"},
			container: 1000 * mib,
			want:      GoRuntime{GCPercent: 400, GCPercentFrom: "GOGC", MemoryLimit: math.MaxInt64, MemoryLimitFrom: "GOMEMLIMIT"},
		},
		{
			name: "GOGC alone",
			cfg:  conf.Runtime{GCPercent: 400},
			env:  map[string]string{"GOGC": "off"},
			want: GoRuntime{GCPercent: 400, GCPercentFrom: "GOGC", MemoryLimit: math.MaxInt64, MemoryLimitFrom: "none"},
		},
	}
	for _, tc := range tests {
		env := func(key string) (string, bool) { v, ok := tc.env[key]; return v, ok }
		if got := decideGoRuntime(tc.cfg, env, tc.container); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestContainerMemoryLimit(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, text string) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	v2Limit := write("v2-limit", "1073741824\n")
	v2None := write("v2-none", "max\n")
	v1None := write("v1-none", "9223372036854771712\n")
	garbled := write("garbled", "lots\n")
	missing := filepath.Join(dir, "missing")
	tests := []struct {
		name  string
		files []string
		want  int64
	}{
		{"cgroup v2 limit", []string{v2Limit}, 1 << 30},
		{"cgroup v2 without a limit", []string{v2None, v2Limit}, 0},
		{"cgroup v1 without a limit", []string{missing, v1None}, 0},
		{"the first file that exists", []string{missing, v2Limit}, 1 << 30},
		{"unreadable number", []string{garbled}, 0},
		{"no cgroup files", []string{missing}, 0},
	}
	for _, tc := range tests {
		if got := containerMemoryLimit(tc.files); got != tc.want {
			t.Errorf("%s: got %d, want %d", tc.name, got, tc.want)
		}
	}
}

// ApplyGoRuntime sets the collector from the configuration, and where GOGC or GOMEMLIMIT
// was given it leaves what the runtime made of them and reports that. (The runtime reads
// the variables when the process starts; the test sets what it would have.)
func TestApplyGoRuntime(t *testing.T) {
	gcBefore, limitBefore := debug.SetGCPercent(100), debug.SetMemoryLimit(-1)
	t.Cleanup(func() {
		debug.SetGCPercent(gcBefore)
		debug.SetMemoryLimit(limitBefore)
	})
	const mib = 1 << 20

	unset := func(key string) {
		t.Helper()
		t.Setenv(key, "") // restored when the test ends
		if err := os.Unsetenv(key); err != nil {
			t.Fatal(err)
		}
	}
	unset("GOMEMLIMIT") // only GOGC given at first
	t.Setenv("GOGC", "150")
	debug.SetGCPercent(150)
	debug.SetMemoryLimit(math.MaxInt64)
	got := ApplyGoRuntime(conf.Runtime{GCPercent: 400, MemoryLimitMiB: 700})
	if got.GCPercent != 150 || got.GCPercentFrom != "GOGC" || got.MemoryLimit != 700*mib {
		t.Errorf("GOGC=150: reported %+v, want 150 from GOGC and a 700 MiB limit", got)
	}
	if now := debug.SetGCPercent(100); now != 150 {
		t.Errorf("GOGC=150: the collector runs at %d, want 150 left as the runtime set it", now)
	}
	if now := debug.SetMemoryLimit(-1); now != 700*mib {
		t.Errorf("runtime.memoryLimitMiB 700: the limit is %d, want %d", now, 700*mib)
	}

	unset("GOGC")
	t.Setenv("GOMEMLIMIT", "300MiB")
	debug.SetMemoryLimit(300 * mib)
	got = ApplyGoRuntime(conf.Runtime{GCPercent: 400, MemoryLimitMiB: 700})
	if got.GCPercent != 400 || got.MemoryLimit != 300*mib || got.MemoryLimitFrom != "GOMEMLIMIT" {
		t.Errorf("GOMEMLIMIT=300MiB: reported %+v, want 400 from the configuration and 300 MiB from GOMEMLIMIT", got)
	}
	if now := debug.SetGCPercent(100); now != 400 {
		t.Errorf("runtime.gcPercent 400: the collector runs at %d", now)
	}
	if now := debug.SetMemoryLimit(-1); now != 300*mib {
		t.Errorf("GOMEMLIMIT=300MiB: the limit is %d, want it left at %d", now, 300*mib)
	}
}
