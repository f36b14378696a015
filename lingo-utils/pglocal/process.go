package pglocal

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// serverProcess is a server this package started in a folder of its own. It stays a direct
// child that is always waited on, because PID 1 here does not reap orphans.
type serverProcess struct {
	name     string
	dir      string
	logPath  string
	cmd      *exec.Cmd
	exited   chan struct{}
	exitErr  error
	stopOnce sync.Once
	stopErr  error
}

// startServer starts cmd with its output in dir/logName. On failure dir is removed, so the
// caller has nothing to clean up.
func startServer(name, dir, logName string, cmd *exec.Cmd) (*serverProcess, error) {
	logPath := filepath.Join(dir, logName)
	logFile, err := os.Create(logPath)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("pglocal: log file: %w", err)
	}
	// The child has its own descriptor once started; ours only needs to go.
	defer func() { _ = logFile.Close() }()
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("pglocal: start %s: %w", name, err)
	}
	p := &serverProcess{name: name, dir: dir, logPath: logPath, cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.exitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// waitAccepting polls until the server accepts a connection on dsn, giving up early with the
// tail of its log when the process dies or ctx ends, so a failed start says why.
func (p *serverProcess) waitAccepting(ctx context.Context, dsn string, every time.Duration) error {
	for {
		probeCtx, cancel := context.WithTimeout(ctx, time.Second)
		err := Probe(probeCtx, dsn)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-p.exited:
			return fmt.Errorf("pglocal: %s exited during start-up (%v); log: %s", p.name, p.exitErr, tailFile(p.logPath)) //nolint:errorlint // the exit status may be nil (a clean exit is still a failure here)
		case <-ctx.Done():
			return fmt.Errorf("pglocal: %s not ready: %w (last error: %w); log: %s", p.name, ctx.Err(), err, tailFile(p.logPath))
		case <-time.After(every):
		}
	}
}

// stop asks the server to shut down with SIGINT, kills it after grace, waits for it to exit
// and removes its folder. It is safe to call more than once.
func (p *serverProcess) stop(grace time.Duration) error {
	p.stopOnce.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-p.exited:
		case <-time.After(grace):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		p.stopErr = os.RemoveAll(p.dir)
	})
	return p.stopErr
}

// Exited is closed when the server process has exited.
func (p *serverProcess) Exited() <-chan struct{} { return p.exited }

// newServerDir makes a private folder for a server under os.TempDir, owned by the user the
// server runs as (credential; nil when this process is not root). Not t.TempDir(): its
// parent is root-only, so the postgres user could not enter it.
func newServerDir(prefix string, credential *syscall.Credential) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", fmt.Errorf("pglocal: temp dir: %w", err)
	}
	if err := chownTo(dir, credential); err != nil {
		_ = os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// chownTo hands path to the server's user; without a credential there is nothing to do.
func chownTo(path string, credential *syscall.Credential) error {
	if credential == nil {
		return nil
	}
	if err := os.Chown(path, int(credential.Uid), int(credential.Gid)); err != nil {
		return fmt.Errorf("pglocal: chown %s: %w", path, err)
	}
	return nil
}

// tailFile returns the last 2000 bytes of a log, enough to show a start-up failure.
func tailFile(path string) string {
	data, _ := os.ReadFile(path)
	if len(data) > 2000 {
		data = data[len(data)-2000:]
	}
	return strings.TrimSpace(string(data))
}
