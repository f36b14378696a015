package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// teardown undoes the run's start-up steps, newest first: the service stops before the
// node and the database it uses, the database is dropped before its server goes.
type teardown struct {
	steps []teardownStep
}

type teardownStep struct {
	name string
	undo func() error
}

func (t *teardown) add(name string, undo func() error) {
	t.steps = append(t.steps, teardownStep{name, undo})
}

// run performs every step, even after one fails, and returns their failures.
func (t *teardown) run(out io.Writer) error {
	var errs []error
	for i := len(t.steps) - 1; i >= 0; i-- {
		s := t.steps[i]
		if err := s.undo(); err != nil {
			fmt.Fprintf(out, "    teardown: %s: %v\n", s.name, err)
			errs = append(errs, fmt.Errorf("teardown %s: %w", s.name, err))
		}
	}
	t.steps = nil
	return errors.Join(errs...)
}

// keepLogs copies the run's logs and generated config (not geth's chain data) to dest.
func keepLogs(workDir, dest string, out io.Writer) error {
	copied := 0
	err := filepath.WalkDir(workDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path == filepath.Join(workDir, "geth", "data") {
			return fs.SkipDir // chain data; its pebble write-ahead logs end in .log too
		}
		if d.IsDir() || !(strings.HasSuffix(path, ".log") || strings.HasSuffix(path, ".yaml")) {
			return nil
		}
		rel, err := filepath.Rel(workDir, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dest, rel)
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		copied++
		return os.WriteFile(target, data, 0o644)
	})
	if err != nil {
		return fmt.Errorf("keep logs in %s: %w", dest, err)
	}
	fmt.Fprintf(out, "    kept %d log and config files in %s\n", copied, dest)
	return nil
}
