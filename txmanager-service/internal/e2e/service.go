package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
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
	return buildCommand(ctx, moduleDir, binDir, "txmanager-service")
}

// buildCommand compiles ./cmd/<name> of the module at moduleDir into binDir/<name> and
// returns the binary's path.
func buildCommand(ctx context.Context, moduleDir, binDir, name string) (string, error) {
	bin := filepath.Join(binDir, name)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/"+name)
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
	dir         string
	ownsDir     bool
	stopTimeout time.Duration
	proc        *child
}

// StartService writes the config, starts the binary with -conf and waits up to 60s
// (migrations included) until GET /readyz answers 200. ctx bounds only the start-up; the
// process runs until Stop or Kill.
func StartService(ctx context.Context, opts ServiceOptions) (*Service, error) {
	cfg := opts.Config
	for _, addr := range []*string{&cfg.HTTPAddr, &cfg.GRPCAddr} {
		if *addr == "" {
			free, err := FreeAddr()
			if err != nil {
				return nil, err
			}
			*addr = free
		}
	}
	if cfg.NodeID == "" {
		cfg.NodeID = "e2e-" + cfg.GRPCAddr
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
	if err := s.waitReady(ctx, 60*time.Second); err != nil {
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

func (s *Service) waitReady(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
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

// HTTPURL is the base URL of the service's HTTP API.
func (s *Service) HTTPURL() string { return "http://" + s.config.HTTPAddr }

// GRPCAddr is the host:port of the service's gRPC API.
func (s *Service) GRPCAddr() string { return s.config.GRPCAddr }

// Config is the configuration the process runs with, ports and node id filled in; a suite
// restarts a killed instance on the same ports by passing it to StartService again.
func (s *Service) Config() ServiceConfig { return s.config }

// LogPath is the file holding the process's stdout and stderr.
func (s *Service) LogPath() string { return s.proc.logPath }

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
