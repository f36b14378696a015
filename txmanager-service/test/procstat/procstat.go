// Package procstat reads CPU time from Linux's /proc: the whole machine's (busy, stolen by
// the hypervisor, total) and one process's, and a process's peak memory. Benchmarks and the chain benchmark tool use it
// to say where a run's time went on a machine whose cores everything shares.
package procstat

import (
	"fmt"
	"os"
	"path/filepath"
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

// Proc reads CPU times from a /proc tree at Root; the zero value reads this machine's
// /proc. Tests point Root at a folder of fixture files.
type Proc struct{ Root string }

func (p Proc) path(elem ...string) string {
	root := p.Root
	if root == "" {
		root = "/proc"
	}
	return filepath.Join(append([]string{root}, elem...)...)
}

// Machine reads this machine's CPU times so far; ok is false where /proc/stat is missing
// or unreadable (not Linux).
func Machine() (times MachineTimes, ok bool) { return Proc{}.Machine() }

// ProcessSeconds is the CPU time (user and system) process pid has used so far.
func ProcessSeconds(pid int) (float64, error) { return Proc{}.ProcessSeconds(pid) }

// Machine reads the machine's CPU times so far from stat; ok is false when it is missing
// or unreadable.
func (p Proc) Machine() (times MachineTimes, ok bool) {
	data, err := os.ReadFile(p.path("stat"))
	if err != nil {
		return MachineTimes{}, false
	}
	return machineTimes(string(data))
}

// ProcessSeconds is the CPU time (user and system) process pid has used so far.
func (p Proc) ProcessSeconds(pid int) (float64, error) {
	file := p.path(strconv.Itoa(pid), "stat")
	raw, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	seconds, err := statSeconds(string(raw))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", file, err)
	}
	return seconds, nil
}

// PeakResidentBytes is the most memory process pid has held resident so far (VmHWM of its
// status file): what a setting that trades memory for CPU costs.
func (p Proc) PeakResidentBytes(pid int) (int64, error) {
	file := p.path(strconv.Itoa(pid), "status")
	raw, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(raw)) {
		value, found := strings.CutPrefix(line, "VmHWM:")
		if !found {
			continue
		}
		// "VmHWM:	  123456 kB"
		fields := strings.Fields(value)
		if len(fields) != 2 || fields[1] != "kB" {
			break
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			break
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("%s: no VmHWM line in kB", file)
}

// machineTimes reads the aggregate "cpu" line, the first of /proc/stat; ok is false when
// it is not there or not numbers.
func machineTimes(stat string) (times MachineTimes, ok bool) {
	line, _, _ := strings.Cut(stat, "\n")
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
