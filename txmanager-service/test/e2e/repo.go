package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// FindRepo returns the monorepo root: flagValue when given, otherwise the nearest folder at
// or above the working directory. Either way the root must hold every path in markers
// (relative, e.g. "go.work"), so a tool fails at once rather than half-way through a run.
func FindRepo(flagValue string, markers ...string) (string, error) {
	start := flagValue
	if start == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("working directory: %w", err)
		}
		start = wd
	}
	dir, err := filepath.Abs(start)
	if err != nil {
		return "", fmt.Errorf("repo path: %w", err)
	}
	for {
		if holdsAll(dir, markers) {
			return dir, nil
		}
		if flagValue != "" {
			return "", fmt.Errorf("-repo %s lacks %s", flagValue, strings.Join(markers, ", "))
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no monorepo root (holding %s) at or above the working directory; pass -repo", strings.Join(markers, ", "))
		}
		dir = parent
	}
}

func holdsAll(dir string, markers []string) bool {
	for _, name := range markers {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return false
		}
	}
	return true
}
