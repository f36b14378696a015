package clef

import (
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// Only an exit by the signal asked about counts as one: another signal, an exit status or
// no error at all does not.
func TestEndedBySignal(t *testing.T) {
	t.Parallel()
	endedBy := func(t *testing.T, sig syscall.Signal) error {
		t.Helper()
		cmd := exec.Command("sleep", "30")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		if err := cmd.Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		return cmd.Wait()
	}
	exitStatus := exec.Command("sh", "-c", "exit 3").Run()
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"interrupted", endedBy(t, syscall.SIGINT), true},
		{"interrupted, wrapped as the harness reports it", fmt.Errorf("clef exited: %w", endedBy(t, syscall.SIGINT)), true},
		{"terminated", endedBy(t, syscall.SIGTERM), false},
		{"exit status 3", exitStatus, false},
		{"clean exit", nil, false},
		{"another error", errors.New("clef did not exit within 10s of interrupt and was killed"), false},
	}
	for _, tt := range tests {
		if got := endedBySignal(tt.err, syscall.SIGINT); got != tt.want {
			t.Errorf("%s (%v): endedBySignal = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}
