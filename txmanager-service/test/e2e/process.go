package e2e

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// child is a process this one started and owns: it runs with its output in a log file, a
// goroutine waits for it (so it is reaped even though PID 1 here reaps nothing), and the
// kernel kills it if this process dies first.
type child struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	// logStart is where this life's output begins in the log: a restarted process appends
	// to its earlier lives' output, whose announced ports are stale.
	logStart int64

	exited  chan struct{}
	exitErr error // set before exited is closed

	stopOnce sync.Once
	stopErr  error
}

// startChild starts bin with args, appending stdout and stderr to logPath: a process
// restarted in the same folder (as a fault suite does) keeps its earlier lives' output.
func startChild(name, logPath string, env []string, bin string, args ...string) (*child, error) {
	return startChildAs(name, logPath, env, nil, bin, args...)
}

// startChildAs is startChild running the process as credential's user (nil: this one's).
func startChildAs(name, logPath string, env []string, credential *syscall.Credential, bin string, args ...string) (*child, error) {
	return startChildWithInput(name, logPath, env, credential, nil, bin, args...)
}

// startChildWithInput is startChildAs with stdin (nil: none) as the process's standard
// input, for programs that read a secret there rather than from a file or the command line.
func startChildWithInput(name, logPath string, env []string, credential *syscall.Credential, stdin io.Reader, bin string, args ...string) (*child, error) {
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: log file: %w", name, err)
	}
	// The child holds its own descriptor; ours is not needed once it has started.
	defer func() { _ = logFile.Close() }()
	logInfo, err := logFile.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: log file: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Stdin = stdin
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Pdeathsig: if this process dies without stopping its children they die too
		// rather than linger as orphans holding ports. (It fires when the thread that
		// forked exits; Go only retires threads of goroutines that exit while locked to
		// one, which nothing here does.)
		Pdeathsig: syscall.SIGKILL,
		// Own process group: a terminal's Ctrl-C reaches only the driver, which then stops
		// its children in order instead of having them all die at once.
		Setpgid:    true,
		Credential: credential,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: start %s: %w", name, bin, err)
	}
	c := &child{name: name, cmd: cmd, logPath: logPath, logStart: logInfo.Size(), exited: make(chan struct{})}
	go func() {
		c.exitErr = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

// stop sends sig and waits up to grace for the process to exit, then kills it. It is safe
// to call more than once and after the process has exited on its own; it reports how the
// process ended if that was not a clean exit.
func (c *child) stop(sig syscall.Signal, grace time.Duration) error {
	c.stopOnce.Do(func() {
		select {
		case <-c.exited:
			c.stopErr = c.exitError()
			return
		default:
		}
		_ = c.cmd.Process.Signal(sig)
		// A paused (SIGSTOPped) process would not act on sig until continued.
		_ = c.cmd.Process.Signal(syscall.SIGCONT)
		select {
		case <-c.exited:
			c.stopErr = c.exitError()
		case <-time.After(grace):
			_ = c.cmd.Process.Kill()
			<-c.exited
			c.stopErr = fmt.Errorf("%s did not exit within %s of %s and was killed", c.name, grace, sig)
		}
	})
	return c.stopErr
}

// kill sends SIGKILL and waits for the process to be gone, so that its ports are free. A
// later stop then has nothing to do and reports nothing: the kill was intended.
func (c *child) kill() {
	_ = c.cmd.Process.Kill()
	<-c.exited
	c.stopOnce.Do(func() {})
}

// signal delivers sig unless the process has already exited.
func (c *child) signal(sig syscall.Signal) error {
	select {
	case <-c.exited:
		return fmt.Errorf("%s: signal %s: process has exited", c.name, sig)
	default:
	}
	if err := c.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("%s: signal %s: %w", c.name, sig, err)
	}
	return nil
}

// exitError is nil for a clean exit, else how the process ended.
func (c *child) exitError() error {
	if c.exitErr == nil {
		return nil
	}
	return fmt.Errorf("%s exited: %w", c.name, c.exitErr)
}

// exitedEarly describes a process that ended while it was expected to run.
func (c *child) exitedEarly() error {
	err := c.exitErr
	if err == nil {
		err = errors.New("exit status 0")
	}
	return fmt.Errorf("%s exited unexpectedly (%w); log tail:\n%s", c.name, err, tailFile(c.logPath, 30))
}

// ownedDir returns dir, creating it; when dir is empty it makes a temporary folder and
// reports that the caller owns it (and must remove it).
func ownedDir(dir, pattern string) (path string, owned bool, err error) {
	if dir == "" {
		path, err = os.MkdirTemp("", pattern)
		if err != nil {
			return "", false, fmt.Errorf("temp dir: %w", err)
		}
		return path, true, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", false, fmt.Errorf("create %s: %w", dir, err)
	}
	return dir, false, nil
}

// tailFile is the last lines of a log, for error messages.
func tailFile(path string, lines int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(cannot read %s: %v)", path, err)
	}
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
