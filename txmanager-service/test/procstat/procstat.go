// Package procstat reads CPU time from Linux's /proc: the whole machine's (busy, stolen by
// the hypervisor, total) and one process's. Benchmarks and the chain benchmark tool use it
// to say where a run's time went on a machine whose cores everything shares.
package procstat

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// userHZ is the unit of the CPU times in /proc: USER_HZ, 100 on every Linux architecture
// (it is part of the kernel's user-space ABI).
const userHZ = 100

// MachineTimes are the aggregate "cpu" line of /proc/stat, in ticks: Total sums user nice
// system idle iowait irq softirq steal (guest time is already inside user), Busy is all of
// that but idle and iowait, Steal is what the hypervisor took.
type MachineTimes struct{ Busy, Steal, Total uint64 }

// Machine reads the machine's CPU times so far; ok is false where /proc/stat is missing
// or unreadable (not Linux).
func Machine() (times MachineTimes, ok bool) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return MachineTimes{}, false
	}
	line, _, _ := strings.Cut(string(data), "\n")
	fields := strings.Fields(line)
	if len(fields) < 9 || fields[0] != "cpu" {
		return MachineTimes{}, false
	}
	for i, f := range fields[1:9] {
		v, err := strconv.ParseUint(f, 10, 64)
		if err != nil {
			return MachineTimes{}, false
		}
		times.Total += v
		switch i {
		case 3, 4: // idle, iowait
		case 7:
			times.Steal = v
			times.Busy += v
		default:
			times.Busy += v
		}
	}
	return times, true
}

// ProcessSeconds is the CPU time (user and system) process pid has used so far.
func ProcessSeconds(pid int) (float64, error) {
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
