package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/conf"
)

// BuildService compiles cmd/txmanager-service of the service module at moduleDir into
// binDir and returns the binary's path.
func BuildService(ctx context.Context, moduleDir, binDir string) (string, error) {
	return buildCommand(ctx, moduleDir, binDir, "cmd/txmanager-service")
}

// buildCommand compiles the command at pkgDir (relative to the module at moduleDir) into
// binDir, under the command folder's name, and returns the binary's path.
func buildCommand(ctx context.Context, moduleDir, binDir, pkgDir string) (string, error) {
	name := path.Base(pkgDir)
	bin := filepath.Join(binDir, name)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./"+pkgDir)
	cmd.Dir = moduleDir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s in %s: %w\n%s", name, moduleDir, err, out)
	}
	return bin, nil
}

// ServiceOptions describes one service process.
type ServiceOptions struct {
	Bin    string
	Config ServiceConfig
	// Dir receives the config file and the log; empty means a temporary folder that Stop
	// and Kill remove (so keep Dir when the log is wanted afterwards).
	Dir string
	// StopTimeout is how long Stop waits after SIGTERM before SIGKILL; 0 means 30s.
	StopTimeout time.Duration
}

// Service is a running txmanager-service process.
type Service struct {
	config      ServiceConfig
	addrs       serviceAddrs // as bound, read from the process's output
	dir         string
	ownsDir     bool
	stopTimeout time.Duration
	proc        *child
}

// StartService writes the config, starts the binary with -conf, reads the addresses it
// bound from its "serving" log line and waits until GET /readyz answers 200; all of it
// within 60s (migrations included). ctx bounds only the start-up; the process runs until
// Stop or Kill.
func StartService(ctx context.Context, opts ServiceOptions) (*Service, error) {
	cfg := opts.Config
	// Port 0: the service binds what the kernel gives and reports it, so no other process
	// can take the port in between; a restart (StartService with Config()) gets new ports.
	for _, addr := range []*string{&cfg.HTTPAddr, &cfg.GRPCAddr} {
		if *addr == "" {
			*addr = "127.0.0.1:0"
		}
	}
	if cfg.NodeID == "" {
		// Not derived from a port, which changes on restart: the node id must not, or the
		// restarted process would be a stranger to its own leases.
		cfg.NodeID = "e2e-" + rand.Text()[:8]
	}
	body, err := RenderConfig(cfg)
	if err != nil {
		return nil, err
	}
	dir, owned, err := ownedDir(opts.Dir, "txm-e2e-service-")
	if err != nil {
		return nil, err
	}
	confPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(confPath, body, 0o600); err != nil {
		removeIfOwned(dir, owned)
		return nil, fmt.Errorf("write service config: %w", err)
	}
	proc, err := startChild("txmanager-service "+cfg.NodeID, filepath.Join(dir, "service.log"),
		serviceEnv(os.Environ()), opts.Bin, "-conf", confPath)
	if err != nil {
		removeIfOwned(dir, owned)
		return nil, err
	}
	s := &Service{config: cfg, dir: dir, ownsDir: owned, stopTimeout: opts.StopTimeout, proc: proc}
	if s.stopTimeout <= 0 {
		s.stopTimeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	s.addrs, err = waitForAnnouncement(ctx, proc, "the addresses it serves on", parseServingLine)
	if err == nil {
		err = s.waitReady(ctx)
	}
	if err != nil {
		s.Kill()
		return nil, err
	}
	return s, nil
}

// serviceEnv is base without the variables the service's defaults read: the generated file
// must be the whole configuration, whatever the developer's shell exports (a DATABASE_URL
// there must not point a run at the wrong database).
func serviceEnv(base []string) []string {
	read := conf.EnvironmentVariables()
	env := make([]string, 0, len(base))
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(read, name) {
			env = append(env, kv)
		}
	}
	return env
}

func (s *Service) waitReady(ctx context.Context) error {
	client := &http.Client{Timeout: 3 * time.Second}
	url := s.HTTPURL() + "/readyz"
	lastStatus := "no answer"
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			lastStatus = resp.Status
		}
		select {
		case <-s.proc.exited:
			return s.proc.exitedEarly()
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s (last: %s): %w; log tail:\n%s",
				s.proc.name, url, lastStatus, ctx.Err(), tailFile(s.proc.logPath, 30))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// HTTPURL is the base URL of the service's HTTP API, on the port it bound.
func (s *Service) HTTPURL() string { return "http://" + s.addrs.HTTP }

// GRPCAddr is the host:port the service's gRPC API bound.
func (s *Service) GRPCAddr() string { return s.addrs.GRPC }

// Config is the configuration the process was started with, node id filled in and ports
// as configured (0 unless the caller chose them); a suite restarts a killed instance by
// passing it to StartService again: the same node, possibly on other ports.
func (s *Service) Config() ServiceConfig { return s.config }

// LogPath is the file holding the process's stdout and stderr.
func (s *Service) LogPath() string { return s.proc.logPath }

// PID is the service's process id.
func (s *Service) PID() int { return s.proc.cmd.Process.Pid }

// Exited is closed when the process has exited, for whatever reason.
func (s *Service) Exited() <-chan struct{} { return s.proc.exited }

// Stop shuts the service down gracefully (SIGTERM: stop intake, flush, release leases) and
// waits, killing it after the stop timeout. It reports an unclean exit.
func (s *Service) Stop() error {
	err := s.proc.stop(syscall.SIGTERM, s.stopTimeout)
	removeIfOwned(s.dir, s.ownsDir)
	return err
}

// Kill ends the process at once, as a crash would, and waits until it is gone.
func (s *Service) Kill() {
	s.proc.kill()
	removeIfOwned(s.dir, s.ownsDir)
}

// Pause freezes the process (SIGSTOP): it holds its connections and leases but does
// nothing, like a long GC pause or a stalled VM.
func (s *Service) Pause() error { return s.proc.signal(syscall.SIGSTOP) }

// Resume continues a paused process (SIGCONT).
func (s *Service) Resume() error { return s.proc.signal(syscall.SIGCONT) }

func removeIfOwned(dir string, owned bool) {
	if owned {
		_ = os.RemoveAll(dir)
	}
}
