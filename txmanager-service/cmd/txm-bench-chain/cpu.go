package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// userHZ is the unit of the CPU times in /proc/<pid>/stat: USER_HZ, 100 on every Linux
// architecture this runs on (it is part of the kernel's user-space ABI).
const userHZ = 100

// cpuAccount is the CPU time each participant of a measured run used, read from /proc: on
// a machine whose cores the node, the database, the service and this load generator share,
// it says where the run's time went.
type cpuAccount struct {
	began   time.Time
	machine machineTime
	// processes are the participants with one process each (service, geth, this one).
	processes []accountedProcess
	// backends are the database's server processes serving the run, by pid: CPU seconds
	// when first seen (0 for one that started during the run) and when last seen.
	backends        map[int]*[2]float64
	backendsSampled bool
}

type accountedProcess struct {
	name  string
	pid   int
	start float64
}

// machineTime is the whole machine's CPU time from /proc/stat, in ticks.
type machineTime struct{ busy, total uint64 }

// startCPUAccount begins accounting for the named processes.
func startCPUAccount(processes map[string]int, order ...string) *cpuAccount {
	a := &cpuAccount{began: time.Now(), machine: readMachineTime(), backends: map[int]*[2]float64{}}
	for _, name := range order {
		pid := processes[name]
		seconds, _ := processSeconds(pid)
		a.processes = append(a.processes, accountedProcess{name: name, pid: pid, start: seconds})
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
		seconds, err := processSeconds(int(pid))
		if err != nil {
			continue
		}
		if seen, ok := a.backends[int(pid)]; ok {
			seen[1] = max(seen[1], seconds)
			continue
		}
		first := seconds
		if a.backendsSampled {
			first = 0 // started during the run: all of its time is the run's
		}
		a.backends[int(pid)] = &[2]float64{first, seconds}
	}
	a.backendsSampled = true
}

// finish reads every process once more and describes the account.
func (a *cpuAccount) finish() string {
	elapsed := time.Since(a.began)
	machine := readMachineTime()
	var parts []string
	for i := range a.processes {
		p := &a.processes[i]
		seconds, err := processSeconds(p.pid)
		if err != nil {
			parts = append(parts, p.name+" unknown")
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.1f s", p.name, seconds-p.start))
	}
	if len(a.backends) > 0 {
		var database float64
		for pid, seen := range a.backends {
			// A pid read again after its process ended may name another one: keep what
			// was seen while it served, and never count a time going backwards.
			if seconds, err := processSeconds(pid); err == nil && seconds >= seen[1] {
				seen[1] = seconds
			}
			database += max(seen[1]-seen[0], 0)
		}
		parts = append(parts, fmt.Sprintf("database %.1f s (%d server processes)", database, len(a.backends)))
	}
	busy := "unknown"
	if total := machine.total - a.machine.total; total > 0 {
		busy = fmt.Sprintf("%.0f%%", 100*float64(machine.busy-a.machine.busy)/float64(total))
	}
	return fmt.Sprintf("CPU over %s: %s; the machine's cores %s busy", elapsed.Round(100*time.Millisecond), strings.Join(parts, ", "), busy)
}

// processSeconds is the CPU time (user and system) process pid has used so far.
func processSeconds(pid int) (float64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	seconds, err := statSeconds(string(raw))
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return seconds, nil
}

// statSeconds is utime + stime of a /proc/<pid>/stat line, in seconds.
func statSeconds(stat string) (float64, error) {
	// The command name (field 2) may hold spaces and parentheses; the fields after it
	// start past its last ')'.
	end := strings.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, fmt.Errorf("no command name")
	}
	fields := strings.Fields(stat[end+1:])
	// fields[0] is the state (field 3): utime and stime are fields 14 and 15.
	if len(fields) < 13 {
		return 0, fmt.Errorf("%d fields after the command name, want at least 13", len(fields))
	}
	utime, err1 := strconv.ParseUint(fields[11], 10, 64)
	stime, err2 := strconv.ParseUint(fields[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("times %q %q are not numbers", fields[11], fields[12])
	}
	return float64(utime+stime) / userHZ, nil
}

// readMachineTime is the machine's busy and total CPU ticks so far (zero when /proc/stat
// cannot be read).
func readMachineTime() machineTime {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineTime{}
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	fields := strings.Fields(line)
	if len(fields) < 5 || fields[0] != "cpu" {
		return machineTime{}
	}
	var t machineTime
	for i, field := range fields[1:] {
		ticks, err := strconv.ParseUint(field, 10, 64)
		if err != nil {
			return machineTime{}
		}
		// guest and guest_nice (fields 9 and 10) are already counted in user and nice.
		if i >= 8 {
			break
		}
		t.total += ticks
		if i != 3 && i != 4 { // idle, iowait
			t.busy += ticks
		}
	}
	return t
}
