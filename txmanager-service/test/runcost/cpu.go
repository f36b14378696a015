package runcost

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bionicotaku/txmanager-service/test/procstat"
)

// CPUAccount is the CPU time each participant of a measured run used, read from /proc: on
// a machine whose cores the node, the database, the service and this load generator share,
// it says where the run's time went.
type CPUAccount struct {
	proc    procstat.Proc
	now     func() time.Time
	began   time.Time
	machine procstat.MachineTimes
	// processes are the participants with one process each (service, geth, this one).
	processes []Process
	// backends are the database's server processes serving the run, by pid.
	backends        map[int]*backendTimes
	backendsSampled bool
	// kinds are the server processes' backend_type (client backend, autovacuum worker,
	// walwriter, checkpointer...), by pid, where the database named it.
	kinds map[int]string
}

// Process is a participant: its name, its pid and (once started) its CPU seconds
// when the account began.
type Process struct {
	Name  string
	PID   int
	start float64
}

// backendTimes are a database server process's CPU seconds when first seen (0 for one
// that started during the run) and the most it was seen at since.
type backendTimes struct{ first, last float64 }

// saw records a reading; a pid read again after its process ended may name another one,
// so a reading below the last never counts.
func (b *backendTimes) saw(seconds float64) { b.last = max(b.last, seconds) }

// StartCPUAccount begins accounting for processes, reported in this order.
func StartCPUAccount(processes ...Process) *CPUAccount {
	return newCPUAccount(procstat.Proc{}, time.Now, processes...)
}

// newCPUAccount begins accounting for processes from the /proc tree proc, on the clock now.
func newCPUAccount(proc procstat.Proc, now func() time.Time, processes ...Process) *CPUAccount {
	machine, _ := proc.Machine()
	a := &CPUAccount{proc: proc, now: now, began: now(), machine: machine, processes: processes, backends: map[int]*backendTimes{}, kinds: map[int]string{}}
	for i := range a.processes {
		a.processes[i].start, _ = proc.ProcessSeconds(a.processes[i].PID)
	}
	return a
}

// SampleBackends records the CPU time of the database's server processes that serve conn's
// database and of the server's background processes (WAL writer, checkpointer, autovacuum:
// pg_stat_activity rows without a database), but not conn's own. Server processes come and
// go during a run, so call it repeatedly while the run lasts (bench-chain does every 100 ms). It needs the database
// on this machine; elsewhere it records nothing.
func (a *CPUAccount) SampleBackends(ctx context.Context, conn *pgx.Conn) {
	rows, err := conn.Query(ctx, `SELECT pid, COALESCE(backend_type, '') FROM pg_stat_activity
		WHERE (datname = current_database() OR datname IS NULL) AND pid <> pg_backend_pid()`)
	if err != nil {
		return
	}
	type backend struct {
		PID  int32
		Kind string
	}
	found, err := pgx.CollectRows(rows, pgx.RowToStructByPos[backend])
	if err != nil {
		return
	}
	ints := make([]int, len(found))
	for i, b := range found {
		ints[i] = int(b.PID)
		if b.Kind != "" {
			a.kinds[int(b.PID)] = b.Kind
		}
	}
	a.sawBackends(ints)
}

// sawBackends records the CPU time of the database's server processes pids; the first
// call, at the start, sets where each one already there began, and a process first seen
// later started during the run, so all of its time is the run's.
func (a *CPUAccount) sawBackends(pids []int) {
	for _, pid := range pids {
		seconds, err := a.proc.ProcessSeconds(pid)
		if err != nil {
			continue
		}
		if seen, ok := a.backends[pid]; ok {
			seen.saw(seconds)
			continue
		}
		first := seconds
		if a.backendsSampled {
			first = 0
		}
		a.backends[pid] = &backendTimes{first: first, last: seconds}
	}
	a.backendsSampled = true
}

// CPUReport is an account's result.
type CPUReport struct {
	elapsed time.Duration
	// processes are the participants in the account's order; known is false for one whose
	// times could not be read at the end.
	processes []processCPU
	// Database sums the server processes' seconds (backends of them).
	Database float64
	backends int
	// databaseByKind splits database by backend_type ("other" where it was not named).
	databaseByKind map[string]float64
	// busyPercent is how busy the machine's cores were; known is false where the machine's
	// times could not be read or did not move.
	busyPercent float64
	busyKnown   bool
	// stealPercent is the share of the cores' time the hypervisor gave to other machines:
	// a run that lost much of it measured a slower machine, not a slower service.
	stealPercent float64
}

// Seconds is the CPU seconds of the participant called name (0 when unknown).
func (r CPUReport) Seconds(name string) float64 {
	for _, p := range r.processes {
		if p.name == name && p.known {
			return p.seconds
		}
	}
	return 0
}

type processCPU struct {
	name    string
	seconds float64
	known   bool
}

// Finish reads every process once more and reports the account.
func (a *CPUAccount) Finish() CPUReport {
	r := CPUReport{elapsed: a.now().Sub(a.began)}
	for _, p := range a.processes {
		seconds, err := a.proc.ProcessSeconds(p.PID)
		r.processes = append(r.processes, processCPU{name: p.Name, seconds: seconds - p.start, known: err == nil})
	}
	r.databaseByKind = map[string]float64{}
	for pid, seen := range a.backends {
		if seconds, err := a.proc.ProcessSeconds(pid); err == nil {
			seen.saw(seconds)
		}
		used := max(seen.last-seen.first, 0)
		r.Database += used
		kind := a.kinds[pid]
		if kind == "" {
			kind = "other"
		}
		r.databaseByKind[kind] += used
	}
	r.backends = len(a.backends)
	if machine, ok := a.proc.Machine(); ok && machine.Total > a.machine.Total {
		total := float64(machine.Total - a.machine.Total)
		r.busyPercent = 100 * float64(machine.Busy-a.machine.Busy) / total
		r.stealPercent = 100 * float64(machine.Steal-a.machine.Steal) / total
		r.busyKnown = true
	}
	return r
}

func (r CPUReport) String() string {
	var parts []string
	for _, p := range r.processes {
		if !p.known {
			parts = append(parts, p.name+" unknown")
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.1f s", p.name, p.seconds))
	}
	if r.backends > 0 {
		parts = append(parts, fmt.Sprintf("database %.1f s (%d server processes%s)", r.Database, r.backends, r.kindsText()))
	}
	busy := "unknown busy"
	if r.busyKnown {
		busy = fmt.Sprintf("%.0f%% busy (stolen by the hypervisor %.0f%%)", r.busyPercent, r.stealPercent)
	}
	return fmt.Sprintf("CPU over %s: %s; the machine's cores %s", r.elapsed.Round(100*time.Millisecond), strings.Join(parts, ", "), busy)
}

// kindsText is the database's seconds by kind of server process, most first, as
// "; client backend 9.1 s, autovacuum worker 1.2 s" (empty when none is named).
func (r CPUReport) kindsText() string {
	if _, onlyUnnamed := r.databaseByKind["other"]; len(r.databaseByKind) == 0 || (onlyUnnamed && len(r.databaseByKind) == 1) {
		return ""
	}
	kinds := make([]string, 0, len(r.databaseByKind))
	for k := range r.databaseByKind {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool {
		a, b := r.databaseByKind[kinds[i]], r.databaseByKind[kinds[j]]
		return a > b || (a == b && kinds[i] < kinds[j])
	})
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%s %.1f s", k, r.databaseByKind[k])
	}
	return ": " + strings.Join(parts, ", ")
}
