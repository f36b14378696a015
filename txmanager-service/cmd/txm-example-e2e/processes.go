package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// payoutsProcess is the payouts example binary, a direct child of this process that a
// goroutine waits for (PID 1 here reaps nothing) and that dies with it (Pdeathsig).
type payoutsProcess struct {
	cmd      *exec.Cmd
	exited   chan struct{}
	httpAddr string
}

// servingLine is the payouts service's Kratos log line once it listens:
// "INFO ts=... service=payouts msg=serving http_addr=127.0.0.1:40123".
var servingLine = regexp.MustCompile(`msg=serving http_addr=(\S+)`)

// startPayouts starts the binary with its config and environment, appending its output to
// logPath, and waits until it reports the address it bound (port 0).
func startPayouts(ctx context.Context, bin, confPath, logPath string, env []string) (*payoutsProcess, error) {
	logFile, err := os.OpenFile(logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("payouts log: %w", err)
	}
	defer func() { _ = logFile.Close() }()
	start, err := logFile.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, fmt.Errorf("payouts log: %w", err)
	}
	cmd := exec.Command(bin, "-conf", confPath)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start payouts: %w", err)
	}
	p := &payoutsProcess{cmd: cmd, exited: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(p.exited)
	}()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		data, _ := os.ReadFile(logPath)
		// Only this life's output: an earlier life announced a port that is gone.
		if int64(len(data)) > start {
			if m := servingLine.FindSubmatch(data[start:]); m != nil {
				p.httpAddr = string(m[1])
				return p, nil
			}
		}
		select {
		case <-p.exited:
			return nil, fmt.Errorf("payouts exited at start; log tail:\n%s", tail(logPath))
		case <-ctx.Done():
			p.kill()
			return nil, fmt.Errorf("payouts did not report its address: %w; log tail:\n%s", ctx.Err(), tail(logPath))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// kill ends the process as a crash would and waits until it is gone.
func (p *payoutsProcess) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// stop asks for a graceful exit and kills after grace.
func (p *payoutsProcess) stop(grace time.Duration) {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		p.kill()
	}
}

func tail(path string) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.Join(lines[max(0, len(lines)-25):], "\n")
}

// grpcProxy is a TCP forwarder in this process in front of txmanager's gRPC port. The
// payouts service is configured with the proxy's address, which it keeps while txmanager
// restarts on a port the kernel picks; the proxy follows it (setTarget).
type grpcProxy struct {
	listener net.Listener
	mu       sync.Mutex
	target   string
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
}

func newGRPCProxy(target string) (*grpcProxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("grpc proxy: %w", err)
	}
	p := &grpcProxy{listener: l, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	return p, nil
}

func (p *grpcProxy) addr() string { return p.listener.Addr().String() }

// setTarget points new connections at target and cuts the old ones, as the dead
// process's connections would be.
func (p *grpcProxy) setTarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
	for c := range p.conns {
		_ = c.Close()
	}
}

func (p *grpcProxy) accept() {
	for {
		client, err := p.listener.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		server, err := net.Dial("tcp", target)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		p.conns[client], p.conns[server] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Go(func() { p.pipe(client, server) })
		p.wg.Go(func() { p.pipe(server, client) })
	}
}

func (p *grpcProxy) pipe(dst, src net.Conn) {
	_, _ = io.Copy(dst, src)
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

func (p *grpcProxy) close() {
	_ = p.listener.Close()
	p.setTarget("")
	p.wg.Wait()
}

// payoutsConfig is the example's configuration for the run: its relay claims small batches
// and sends them one at a time, so a kill lands while a batch is in flight.
const payoutsConfig = `server:
  http: {addr: "127.0.0.1:0", timeout: 10s}
database:
  dsn: "${DATABASE_URL:}"
  maxConns: 16
  tx: {isolation: read_committed, timeout: 20s, lockTimeout: 1s}
txmanager:
  endpoints: "${TXMANAGER_ADDR:}"
  callTimeout: 5s
payouts:
  signer: "${PAYOUTS_SIGNER:}"
relay: {interval: 100ms, batchSize: 10, parallelSends: 1, sendTimeout: 10s, retryBackoff: 200ms, maxBackoff: 2s}
consumer: {name: payouts, wait: 2s, page: 20, restartBackoff: 200ms}
`

func writePayoutsConfig(dir string) (string, error) {
	path := filepath.Join(dir, "payouts.yaml")
	if err := os.WriteFile(path, []byte(payoutsConfig), 0o600); err != nil {
		return "", fmt.Errorf("write payouts config: %w", err)
	}
	return path, nil
}
