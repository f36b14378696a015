package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The later fault suite relies on these lifecycles; real (tiny) processes, no geth.
func TestChildLifecycle(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		script  string
		act     func(c *child) error
		wantErr string // "" means a clean stop
	}{
		{
			name:   "SIGTERM stops a process",
			script: "echo ready; exec sleep 30",
			act:    func(c *child) error { return c.stop(syscall.SIGTERM, 5*time.Second) },
			// sleep has no handler, so SIGTERM ends it by signal: reported, not hidden.
			wantErr: "signal: terminated",
		},
		{
			name:   "a paused process still stops",
			script: "trap 'exit 0' TERM; echo ready; while :; do sleep 0.05; done",
			act: func(c *child) error {
				if err := c.signal(syscall.SIGSTOP); err != nil {
					return err
				}
				return c.stop(syscall.SIGTERM, 5*time.Second)
			},
		},
		{
			name:    "a process ignoring the signal is killed after the grace period",
			script:  "trap '' TERM; echo ready; exec sleep 30",
			act:     func(c *child) error { return c.stop(syscall.SIGTERM, 200*time.Millisecond) },
			wantErr: "did not exit within 200ms of terminated and was killed",
		},
		{
			name:   "stop after kill reports nothing",
			script: "echo ready; exec sleep 30",
			act: func(c *child) error {
				c.kill()
				return c.stop(syscall.SIGTERM, time.Second)
			},
		},
		{
			name:    "stop after a crash reports the crash",
			script:  "echo ready; exit 3",
			act:     func(c *child) error { <-c.exited; return c.stop(syscall.SIGTERM, time.Second) },
			wantErr: "exit status 3",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			logPath := filepath.Join(t.TempDir(), "out.log")
			c, err := startChild("test", logPath, os.Environ(), "/bin/sh", "-c", tt.script)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.kill)
			// Act only once the script's traps are installed.
			waitForLine(t, logPath, "ready")
			err = tt.act(c)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("error %v, want one containing %q", err, tt.wantErr)
			}
			select {
			case <-c.exited:
			default:
				t.Error("process still running after the action")
			}
		})
	}
}

func waitForLine(t *testing.T, path, line string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if data, _ := os.ReadFile(path); strings.Contains(string(data), line+"\n") {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%s never printed %q", path, line)
}

func TestChildLogIsAppendedAcrossRestarts(t *testing.T) {
	t.Parallel()
	logPath := filepath.Join(t.TempDir(), "service.log")
	for _, word := range []string{"first", "second"} {
		c, err := startChild("test", logPath, os.Environ(), "/bin/sh", "-c", "echo "+word)
		if err != nil {
			t.Fatal(err)
		}
		<-c.exited
	}
	data, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(data), "first\nsecond\n"; got != want {
		t.Errorf("log = %q, want %q", got, want)
	}
}
