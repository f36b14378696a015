package runcost

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/bionicotaku/txmanager-service/test/procstat"
)

// fakeProc is a /proc tree of fixture files that a test changes between readings.
type fakeProc struct {
	t    *testing.T
	root string
}

func newFakeProc(t *testing.T) *fakeProc {
	return &fakeProc{t: t, root: t.TempDir()}
}

func (f *fakeProc) write(name, text string) {
	f.t.Helper()
	path := filepath.Join(f.root, name)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

// process sets pid's CPU time (as utime and stime in ticks of 10 ms, as the kernel writes).
func (f *fakeProc) process(pid int, seconds float64) {
	ticks := int(math.Round(seconds * 100))
	f.write(strconv.Itoa(pid)+"/stat", fmt.Sprintf("%d (postgres: txm 127.0.0.1(5) idle) S 1 %d %d 0 -1 4194560 100 0 0 0 %d %d 0 0 20 0 1 0",
		pid, pid, pid, ticks-ticks/3, ticks/3))
}

func (f *fakeProc) gone(pid int) {
	f.t.Helper()
	if err := os.RemoveAll(filepath.Join(f.root, strconv.Itoa(pid))); err != nil {
		f.t.Fatal(err)
	}
}

// machine sets /proc/stat's aggregate line: busy ticks (steal of them stolen by the
// hypervisor, the rest user time), the rest idle.
func (f *fakeProc) machine(busy, idle, steal int) {
	f.write("stat", fmt.Sprintf("cpu  %d 0 0 %d 0 0 0 %d 0 0\ncpu0 0 0 0 0 0 0 0 0 0 0\n", busy-steal, idle, steal))
}

func (f *fakeProc) proc() procstat.Proc { return procstat.Proc{Root: f.root} }

// A run as bench-chain accounts it: the participants' own processes, database server
// processes that come, go and have their pids reused, and the machine's cores.
func TestCPUAccount(t *testing.T) {
	t.Parallel()
	const service, geth, loadGen = 10, 11, 12
	tests := []struct {
		name string
		// start lays out the tree the account begins on; run changes it and samples
		// backends between the start and the end.
		start    func(*fakeProc)
		run      func(*fakeProc, *CPUAccount)
		want     CPUReport
		wantText string
	}{
		{
			name: "participants, backends and the machine",
			start: func(f *fakeProc) {
				f.machine(200, 800, 0)
				f.process(service, 1.5)
				f.process(geth, 2)
				f.process(loadGen, 3)
				f.process(20, 5)
				f.process(21, 1)
			},
			run: func(f *fakeProc, a *CPUAccount) {
				a.sawBackends([]int{20, 21}) // at the start: their time so far is not the run's
				f.process(20, 7)
				f.process(21, 1.8)
				f.process(22, 0.5) // started during the run: all of its time is the run's
				a.sawBackends([]int{20, 21, 22, 23 /* gone before it was read */})
				f.gone(21)        // ended: its last reading stands
				f.process(20, .3) // pid 20 reused by a new process: never counted backwards
				f.process(service, 4)
				f.gone(loadGen)
				f.machine(600, 1400, 100)
			},
			want: CPUReport{
				elapsed:   12340 * time.Millisecond,
				processes: []processCPU{{"service", 2.5, true}, {"geth", 0, true}, {"load generator", 0, false}},
				Database:  (7 - 5) + (1.8 - 1) + 0.5, backends: 3,
				busyPercent: 40, busyKnown: true, stealPercent: 10,
			},
			wantText: "CPU over 12.3s: service 2.5 s, geth 0.0 s, load generator unknown, database 3.3 s (3 server processes); the machine's cores 40% busy (stolen by the hypervisor 10%)",
		},
		{
			name: "backends by kind",
			start: func(f *fakeProc) {
				f.process(service, 1)
				f.process(geth, 1)
				f.process(loadGen, 1)
			},
			run: func(f *fakeProc, a *CPUAccount) {
				a.sawBackends(nil) // the start: every process seen later began during the run
				a.kinds[30], a.kinds[31] = "client backend", "autovacuum worker"
				f.process(30, 2)
				f.process(31, 0.5)
				f.process(32, 0.25)
				a.sawBackends([]int{30, 31, 32})
			},
			want: CPUReport{
				elapsed:   12340 * time.Millisecond,
				processes: []processCPU{{"service", 0, true}, {"geth", 0, true}, {"load generator", 0, true}},
				Database:  2.75, backends: 3,
			},
			wantText: "CPU over 12.3s: service 0.0 s, geth 0.0 s, load generator 0.0 s, database 2.8 s (3 server processes: client backend 2.0 s, " +
				"autovacuum worker 0.5 s, other 0.2 s); the machine's cores unknown busy",
		},
		{
			name: "no backends seen and a machine that did not move",
			start: func(f *fakeProc) {
				f.machine(200, 800, 0)
				f.process(service, 1)
				f.process(geth, 1)
				f.process(loadGen, 1)
			},
			run: func(f *fakeProc, a *CPUAccount) {
				a.sawBackends(nil)
				f.process(geth, 3.25)
			},
			want: CPUReport{
				elapsed:   12340 * time.Millisecond,
				processes: []processCPU{{"service", 0, true}, {"geth", 2.25, true}, {"load generator", 0, true}},
			},
			wantText: "CPU over 12.3s: service 0.0 s, geth 2.2 s, load generator 0.0 s; the machine's cores unknown busy",
		},
		{
			name:  "no /proc at all",
			start: func(*fakeProc) {},
			run:   func(_ *fakeProc, a *CPUAccount) { a.sawBackends([]int{20}) },
			want: CPUReport{
				elapsed:   12340 * time.Millisecond,
				processes: []processCPU{{"service", 0, false}, {"geth", 0, false}, {"load generator", 0, false}},
			},
			wantText: "CPU over 12.3s: service unknown, geth unknown, load generator unknown; the machine's cores unknown busy",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeProc(t)
			tc.start(f)
			clock := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
			now := func() time.Time { return clock }
			a := newCPUAccount(f.proc(), now,
				Process{Name: "service", PID: service}, Process{Name: "geth", PID: geth}, Process{Name: "load generator", PID: loadGen})
			tc.run(f, a)
			clock = clock.Add(12340 * time.Millisecond)
			got := a.Finish()

			if got.elapsed != tc.want.elapsed || got.backends != tc.want.backends || got.busyKnown != tc.want.busyKnown ||
				!near(got.Database, tc.want.Database) || !near(got.busyPercent, tc.want.busyPercent) || !near(got.stealPercent, tc.want.stealPercent) || len(got.processes) != len(tc.want.processes) {
				t.Fatalf("report %+v, want %+v", got, tc.want)
			}
			for i, p := range got.processes {
				w := tc.want.processes[i]
				if p.name != w.name || p.known != w.known || (w.known && !near(p.seconds, w.seconds)) {
					t.Errorf("process %d: %+v, want %+v", i, p, w)
				}
			}
			if text := got.String(); text != tc.wantText {
				t.Errorf("text:\n got %s\nwant %s", text, tc.wantText)
			}
		})
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
