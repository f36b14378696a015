package runcost

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
)

// ProfileTop is `go tool pprof -top` over the profiles merged: the functions a process
// spent its CPU in, by own time (flat) or with their callees (cum).
func ProfileTop(ctx context.Context, files []string, entries int, cumulative bool) (string, error) {
	if len(files) == 0 {
		return "", fmt.Errorf("no CPU profile taken")
	}
	args := []string{fmt.Sprintf("-nodecount=%d", entries)}
	if cumulative {
		args = append(args, "-cum")
	}
	return pprofTop(ctx, append(args, files...)...)
}

// pprofTop is `go tool pprof -top` with args (options, then the profiles).
func pprofTop(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", append([]string{"tool", "pprof", "-top"}, args...)...).Output()
	if err != nil {
		return "", fmt.Errorf("go tool pprof: %w", err)
	}
	return strings.TrimRight(string(out), "\n"), nil
}

// writeTop writes a top under its heading, indented below the heading's own indent.
func writeTop(w io.Writer, heading, top string) {
	const indent = "      "
	fmt.Fprintf(w, "    %s:\n%s%s\n", heading, indent, strings.ReplaceAll(top, "\n", "\n"+indent))
}

// PrintProfileTops writes the top entries of the profiles in files to w, by own time and by
// time with callees, under name (detail follows the cumulative flag in the heading), or why
// there is none.
func PrintProfileTops(ctx context.Context, w io.Writer, name, detail string, files []string, entries int) {
	for _, cumulative := range []bool{false, true} {
		top, err := ProfileTop(ctx, files, entries, cumulative)
		if err != nil {
			fmt.Fprintf(w, "    %s: %v\n", name, err)
			return
		}
		writeTop(w, fmt.Sprintf("%s (cumulative=%v%s)", name, cumulative, detail), top)
	}
}

// AllocationTop is the top entries of what a process allocated between two of its
// allocation profiles (/debug/pprof/allocs), by bytes allocated in each function itself:
// end with start as its base.
func AllocationTop(ctx context.Context, start, end string, entries int) (string, error) {
	return pprofTop(ctx, "-sample_index=alloc_space", fmt.Sprintf("-nodecount=%d", entries), "-base", start, end)
}

// PrintAllocationTop writes AllocationTop's entries to w under heading, or why there are none.
func PrintAllocationTop(ctx context.Context, w io.Writer, heading, start, end string, entries int) {
	top, err := AllocationTop(ctx, start, end, entries)
	if err != nil {
		fmt.Fprintf(w, "    %s: %v\n", heading, err)
		return
	}
	writeTop(w, heading, top)
}
