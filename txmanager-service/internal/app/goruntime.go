package app

import (
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/bionicotaku/txmanager-service/internal/conf"
)

// GoRuntime is how the process's garbage collector is set, for the start-up log.
type GoRuntime struct {
	GCPercent int
	// GCPercentFrom and MemoryLimitFrom name where each setting came from.
	GCPercentFrom string
	// MemoryLimit is in bytes; math.MaxInt64 is none.
	MemoryLimit     int64
	MemoryLimitFrom string
}

// Fields are the settings as log key-value pairs.
func (g GoRuntime) Fields() []any {
	limit := "none"
	if g.MemoryLimit != math.MaxInt64 {
		limit = fmt.Sprintf("%d MiB", g.MemoryLimit>>20)
	}
	return []any{"gc_percent", g.GCPercent, "gc_percent_from", g.GCPercentFrom, "memory_limit", limit, "memory_limit_from", g.MemoryLimitFrom}
}

// cgroupMemoryFiles hold the container's memory limit: cgroup v2, then v1.
var cgroupMemoryFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// ApplyGoRuntime sets the garbage collector from cfg, except what the GOGC and GOMEMLIMIT
// environment variables already set (the Go runtime read them at start; an operator's
// explicit choice wins).
func ApplyGoRuntime(cfg conf.Runtime) GoRuntime {
	g := decideGoRuntime(cfg, os.LookupEnv, containerMemoryLimit(cgroupMemoryFiles))
	// Where a variable set it, what the runtime made of it is kept and reported: each setter
	// answers the value it replaces (a negative limit only reads), which is set back.
	if g.GCPercentFrom == "GOGC" {
		g.GCPercent = debug.SetGCPercent(100)
	}
	debug.SetGCPercent(g.GCPercent)
	if g.MemoryLimitFrom == "GOMEMLIMIT" {
		g.MemoryLimit = debug.SetMemoryLimit(-1)
	}
	debug.SetMemoryLimit(g.MemoryLimit)
	return g
}

// containerLimitShare is the part of a container's memory limit the Go heap may fill before
// the collector runs flat out: the rest is the runtime's own, stacks, and cgo's (the signer).
const containerLimitShare = 0.9

// decideGoRuntime works out the settings; container is the container's memory limit in
// bytes, 0 when there is none.
func decideGoRuntime(cfg conf.Runtime, env func(string) (string, bool), container int64) GoRuntime {
	g := GoRuntime{GCPercent: cfg.GCPercent, GCPercentFrom: "runtime.gcPercent", MemoryLimit: math.MaxInt64, MemoryLimitFrom: "none"}
	if _, set := env("GOGC"); set {
		g.GCPercentFrom = "GOGC"
	}
	switch _, set := env("GOMEMLIMIT"); {
	case set:
		g.MemoryLimitFrom = "GOMEMLIMIT"
	case cfg.MemoryLimitMiB > 0:
		g.MemoryLimit, g.MemoryLimitFrom = cfg.MemoryLimitMiB<<20, "runtime.memoryLimitMiB"
	case container > 0:
		g.MemoryLimit, g.MemoryLimitFrom = int64(float64(container)*containerLimitShare), "container limit"
	}
	return g
}

// containerMemoryLimit reads the first of files that holds a limit, in bytes; 0 when none
// does ("max" in cgroup v2, a page-rounded 2^63 in v1, or no such file: no container).
func containerMemoryLimit(files []string) int64 {
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		text := strings.TrimSpace(string(raw))
		if text == "max" {
			return 0
		}
		limit, err := strconv.ParseInt(text, 10, 64)
		// cgroup v1 writes 9223372036854771712 for no limit: anything past 1 PiB is none.
		if err != nil || limit <= 0 || limit >= 1<<50 {
			return 0
		}
		return limit
	}
	return 0
}
