package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bionicotaku/txmanager-service/test/procstat"
)

// cpuAccount is the CPU time each participant of a measured run used, read from /proc: on
// a machine whose cores the node, the database, the service and this load generator share,
// it says where the run's time went.
type cpuAccount struct {
	began   time.Time
	machine procstat.MachineTimes
	// processes are the participants with one process each (service, geth, this one).
	processes []accountedProcess
	// backends are the database's server processes serving the run, by pid.
	backends        map[int]*backendTimes
	backendsSampled bool
}

// accountedProcess is a participant: its name, its pid and (once started) its CPU seconds
// when the account began.
type accountedProcess struct {
	name  string
	pid   int
	start float64
}

// backendTimes are a database server process's CPU seconds when first seen (0 for one
// that started during the run) and the most it was seen at since.
type backendTimes struct{ first, last float64 }

// saw records a reading; a pid read again after its process ended may name another one,
// so a reading below the last never counts.
func (b *backendTimes) saw(seconds float64) { b.last = max(b.last, seconds) }

// startCPUAccount begins accounting for processes, reported in this order.
func startCPUAccount(processes ...accountedProcess) *cpuAccount {
	machine, _ := procstat.Machine()
	a := &cpuAccount{began: time.Now(), machine: machine, processes: processes, backends: map[int]*backendTimes{}}
	for i := range a.processes {
		a.processes[i].start, _ = procstat.ProcessSeconds(a.processes[i].pid)
	}
	return a
}

// sampleBackends records the CPU time of the database's server processes that serve conn's
// database; the first call, at the start, sets where each one already there began. It
// needs the database on this machine; elsewhere it records nothing.
func (a *cpuAccount) sampleBackends(ctx context.Context, conn *pgx.Conn) {
	rows, err := conn.Query(ctx, "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
	if err != nil {
		return
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return
	}
	for _, pid := range pids {
		seconds, err := procstat.ProcessSeconds(int(pid))
		if err != nil {
			continue
		}
		if seen, ok := a.backends[int(pid)]; ok {
			seen.saw(seconds)
			continue
		}
		first := seconds
		if a.backendsSampled {
			first = 0 // started during the run: all of its time is the run's
		}
		a.backends[int(pid)] = &backendTimes{first: first, last: seconds}
	}
	a.backendsSampled = true
}

// finish reads every process once more and describes the account.
func (a *cpuAccount) finish() string {
	elapsed := time.Since(a.began)
	var parts []string
	for _, p := range a.processes {
		seconds, err := procstat.ProcessSeconds(p.pid)
		if err != nil {
			parts = append(parts, p.name+" unknown")
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.1f s", p.name, seconds-p.start))
	}
	if len(a.backends) > 0 {
		var database float64
		for pid, seen := range a.backends {
			if seconds, err := procstat.ProcessSeconds(pid); err == nil {
				seen.saw(seconds)
			}
			database += max(seen.last-seen.first, 0)
		}
		parts = append(parts, fmt.Sprintf("database %.1f s (%d server processes)", database, len(a.backends)))
	}
	busy := "unknown"
	if machine, ok := procstat.Machine(); ok && machine.Total > a.machine.Total {
		busy = fmt.Sprintf("%.0f%%", 100*float64(machine.Busy-a.machine.Busy)/float64(machine.Total-a.machine.Total))
	}
	return fmt.Sprintf("CPU over %s: %s; the machine's cores %s busy", elapsed.Round(100*time.Millisecond), strings.Join(parts, ", "), busy)
}
