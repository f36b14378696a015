package runcost

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
)

// ProfileTop is `go tool pprof -top` over the profiles merged: the functions a process
// spent its CPU in, by own time (flat) or with their callees (cum).
func ProfileTop(ctx context.Context, files []string, entries int, cumulative bool) (string, error) {
	if len(files) == 0 {
		return "", fmt.Errorf("no CPU profile taken")
	}
	args := []string{"tool", "pprof", "-top", fmt.Sprintf("-nodecount=%d", entries)}
	if cumulative {
		args = append(args, "-cum")
	}
	out, err := exec.CommandContext(ctx, "go", append(args, files...)...).Output()
	if err != nil {
		return "", fmt.Errorf("go tool pprof: %w", err)
	}
	return strings.TrimRight(string(out), "\n"), nil
}
