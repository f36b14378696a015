package procstat

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestMachineTimes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		stat string
		want MachineTimes
		ok   bool
	}{
		{
			// user nice system idle iowait irq softirq steal guest guest_nice
			name: "a kernel's first lines",
			stat: "cpu  100 5 50 1000 20 3 2 40 7 0\ncpu0 50 2 25 500 10 1 1 20 3 0\nintr 123\n",
			want: MachineTimes{Busy: 100 + 5 + 50 + 3 + 2 + 40, Steal: 40, Total: 100 + 5 + 50 + 1000 + 20 + 3 + 2 + 40},
			ok:   true,
		},
		{
			// Guest time is inside user already: the columns after steal add nothing.
			name: "guest columns are not counted twice",
			stat: "cpu 10 0 0 10 0 0 0 0 999 999\n",
			want: MachineTimes{Busy: 10, Total: 20},
			ok:   true,
		},
		{name: "an old kernel's eight columns", stat: "cpu 1 2 3 4 5 6 7\n"},
		{name: "a per-core line first", stat: "cpu0 1 2 3 4 5 6 7 8\n"},
		{name: "not numbers", stat: "cpu 1 2 3 four 5 6 7 8\n"},
		{name: "empty", stat: ""},
	}
	for _, tc := range tests {
		got, ok := machineTimes(tc.stat)
		if ok != tc.ok || got != tc.want {
			t.Errorf("%s: got %+v, %v; want %+v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// Proc reads the same files from any root, so a fixture tree stands in for /proc.
func TestProcFixture(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("stat", "cpu 300 0 100 600 0 0 0 0 0 0\n")
	write("42/stat", "42 (geth) S 1 42 42 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 12 0")
	write("43/stat", "43 (broken")
	write("42/status", "Name:\tgeth\nVmPeak:\t  900000 kB\nVmHWM:\t   51200 kB\nVmRSS:\t   40000 kB\n")
	write("43/status", "Name:\tbroken\nVmHWM:\t lots\n")
	proc := Proc{Root: root}

	if got, ok := proc.Machine(); !ok || got != (MachineTimes{Busy: 400, Total: 1000}) {
		t.Errorf("Machine() = %+v, %v; want busy 400 of 1000", got, ok)
	}
	if got, err := proc.ProcessSeconds(42); err != nil || got != 3.25 {
		t.Errorf("ProcessSeconds(42) = %v, %v; want 3.25 s", got, err)
	}
	if _, err := proc.ProcessSeconds(43); err == nil {
		t.Error("a malformed stat file read without an error")
	}
	if _, err := proc.ProcessSeconds(44); !os.IsNotExist(err) {
		t.Errorf("a process that is gone: err = %v, want a not-exist error", err)
	}
	if got, err := proc.PeakResidentBytes(42); err != nil || got != 50<<20 {
		t.Errorf("PeakResidentBytes(42) = %v, %v; want 50 MiB", got, err)
	}
	if _, err := proc.PeakResidentBytes(43); err == nil {
		t.Error("a malformed VmHWM line read without an error")
	}
	if _, err := proc.PeakResidentBytes(44); !os.IsNotExist(err) {
		t.Errorf("PeakResidentBytes of a process that is gone: err = %v, want a not-exist error", err)
	}
	if _, ok := (Proc{Root: t.TempDir()}).Machine(); ok {
		t.Error("Machine() reported times without a stat file")
	}
}

func TestStatSeconds(t *testing.T) {
	cases := []struct {
		name    string
		stat    string
		want    float64
		wantErr bool
	}{
		{name: "plain", stat: "1234 (geth) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 12 0", want: 3.25},
		{name: "name with spaces and parentheses", stat: "77 (postgres: (x) y) R 1 77 77 0 -1 4194304 5 0 0 0 1 2 0 0 20 0 1 0", want: 0.03},
		{name: "no command name", stat: "77 postgres R 1", wantErr: true},
		{name: "too short", stat: "77 (x) R 1 2 3", wantErr: true},
		{name: "times not numbers", stat: "77 (x) R 1 1 1 0 -1 0 0 0 0 0 a b 0 0 20 0 1 0", wantErr: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := statSeconds(tc.stat)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if !tc.wantErr && got != tc.want {
				t.Fatalf("got %v s, want %v s", got, tc.want)
			}
		})
	}
}

// This process's own account reads and grows with work, and the machine's busy and
// stolen times stay within its total (or, without /proc/stat, nothing is reported).
func TestProcessAndMachineTimes(t *testing.T) {
	_, statErr := os.Stat("/proc/stat")
	machineBefore, ok := Machine()
	if statErr != nil {
		if ok {
			t.Fatal("Machine() reported times without /proc/stat")
		}
		return
	}
	before, err := ProcessSeconds(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Busy until the account moves (it counts in ticks of 10 ms), for at most 5 s.
	spin, after, deadline := 0, before, time.Now().Add(5*time.Second)
	for after <= before && time.Now().Before(deadline) {
		for i := range 10_000_000 {
			spin ^= i
		}
		if after, err = ProcessSeconds(os.Getpid()); err != nil {
			t.Fatal(err)
		}
	}
	if after <= before {
		t.Fatalf("CPU seconds stayed at %v over 5 s of a busy loop (%d)", after, spin)
	}
	machineAfter, ok := Machine()
	if !ok || machineBefore.Total == 0 || machineAfter.Total < machineBefore.Total || machineAfter.Busy < machineBefore.Busy ||
		machineAfter.Busy-machineBefore.Busy > machineAfter.Total-machineBefore.Total || machineAfter.Steal > machineAfter.Busy {
		t.Fatalf("machine times %+v -> %+v: want readable times whose busy part grows no faster than the total, steal within busy", machineBefore, machineAfter)
	}
}
