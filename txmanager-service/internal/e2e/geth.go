package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ethereum/go-ethereum/rpc"
)

// GethModuleVersion is the geth release the suite runs against. Later releases need a
// module the Go proxy reachable here refuses, so this is pinned, not "latest".
const GethModuleVersion = "v1.17.8"

// BuildGeth installs geth GethModuleVersion into binDir from the Go module proxy, unless
// binDir already holds that version (the first build takes minutes).
func BuildGeth(ctx context.Context, binDir string) (string, error) {
	bin := filepath.Join(binDir, "geth")
	if version, err := GethVersion(ctx, bin); err == nil && version == strings.TrimPrefix(GethModuleVersion, "v")+"-stable" {
		return bin, nil
	}
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return "", fmt.Errorf("build geth: %w", err)
	}
	cmd := exec.CommandContext(ctx, "go", "install", "github.com/ethereum/go-ethereum/cmd/geth@"+GethModuleVersion)
	// go install pkg@version builds outside any workspace; GOWORK=off keeps an exported
	// GOWORK (the Makefile sets one) from getting in the way.
	cmd.Env = append(os.Environ(), "GOBIN="+binDir, "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install geth@%s: %w\n%s", GethModuleVersion, err, out)
	}
	return bin, nil
}

// GethVersion is the version geth at bin reports ("1.17.8-stable").
func GethVersion(ctx context.Context, bin string) (string, error) {
	out, err := exec.CommandContext(ctx, bin, "version").Output()
	if err != nil {
		return "", fmt.Errorf("%s version: %w", bin, err)
	}
	for line := range strings.Lines(string(out)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Version: "); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("%s version: no Version line in %q", bin, out)
}

// GethOptions describes a dev-mode geth node.
type GethOptions struct {
	Bin string
	// Period is the block time; --dev without a period mines only when a transaction
	// arrives, which would give confirmation counts nothing to count. 0 means 1s.
	Period time.Duration
	// Dir holds the data directory and geth.log; empty means a temporary folder that Stop
	// removes.
	Dir string
	// StartTimeout bounds the wait for JSON-RPC to answer; 0 means 60s.
	StartTimeout time.Duration
}

// Geth is a running `geth --dev` node, reachable over HTTP JSON-RPC on loopback only.
type Geth struct {
	url     string
	dir     string
	ownsDir bool
	proc    *child
}

// StartGeth starts a fresh dev chain (chain id 1337, one prefunded unlocked account) and
// waits until eth_chainId answers. ctx bounds only the start-up.
func StartGeth(ctx context.Context, opts GethOptions) (*Geth, error) {
	period := opts.Period
	if period <= 0 {
		period = time.Second
	}
	if period%time.Second != 0 {
		return nil, fmt.Errorf("geth --dev.period is whole seconds, not %s", period)
	}
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	dir, owned, err := ownedDir(opts.Dir, "txm-e2e-geth-")
	if err != nil {
		return nil, err
	}
	args := []string{
		"--dev", "--dev.period", strconv.Itoa(int(period / time.Second)),
		"--datadir", filepath.Join(dir, "data"),
		"--http", "--http.addr", "127.0.0.1", "--http.port", strconv.Itoa(port), "--http.api", "eth,net,web3",
		// No peers, no discovery, no IPC socket: nothing outside loopback HTTP. (--dev
		// already sets maxpeers 0 and starts no engine API; these make it explicit.)
		"--port", "0", "--nodiscover", "--maxpeers", "0", "--ipcdisable",
	}
	proc, err := startChild("geth", filepath.Join(dir, "geth.log"), os.Environ(), opts.Bin, args...)
	if err != nil {
		removeIfOwned(dir, owned)
		return nil, err
	}
	g := &Geth{url: fmt.Sprintf("http://127.0.0.1:%d", port), dir: dir, ownsDir: owned, proc: proc}
	timeout := opts.StartTimeout
	if timeout <= 0 {
		timeout = 60 * time.Second
	}
	if err := g.waitReady(ctx, timeout); err != nil {
		g.proc.kill()
		removeIfOwned(dir, owned)
		return nil, err
	}
	return g, nil
}

func (g *Geth) waitReady(ctx context.Context, timeout time.Duration) error {
	return waitForRPC(ctx, g.url, g.proc, timeout)
}

// waitForRPC waits until the node at url answers eth_chainId, or its process exits.
func waitForRPC(ctx context.Context, url string, proc *child, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var lastErr error
	for {
		if lastErr = chainIDAnswers(ctx, url); lastErr == nil {
			return nil
		}
		select {
		case <-proc.exited:
			return proc.exitedEarly()
		case <-ctx.Done():
			return fmt.Errorf("%s JSON-RPC at %s not answering (last error: %v): %w; log tail:\n%s",
				proc.name, url, lastErr, ctx.Err(), tailFile(proc.logPath, 30))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func chainIDAnswers(ctx context.Context, url string) error {
	callCtx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	client, err := rpc.DialContext(callCtx, url)
	if err != nil {
		return err
	}
	defer client.Close()
	var id string
	if err := client.CallContext(callCtx, &id, "eth_chainId"); err != nil {
		return err
	}
	if id == "" {
		return errors.New("empty eth_chainId")
	}
	return nil
}

// URL is the node's HTTP JSON-RPC endpoint.
func (g *Geth) URL() string { return g.url }

// LogPath is the file holding geth's output.
func (g *Geth) LogPath() string { return g.proc.logPath }

// Exited is closed when geth has exited.
func (g *Geth) Exited() <-chan struct{} { return g.proc.exited }

// Stop interrupts geth (it flushes its state and exits within seconds), kills it after
// 20s, and removes its folder if this package made it.
func (g *Geth) Stop() error {
	err := g.proc.stop(syscall.SIGINT, 20*time.Second)
	removeIfOwned(g.dir, g.ownsDir)
	return err
}
