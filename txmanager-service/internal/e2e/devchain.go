package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// BuildDevChain compiles cmd/txm-devchain (the embedded simulated chain as a loopback
// JSON-RPC node) of the service module at moduleDir into binDir.
func BuildDevChain(ctx context.Context, moduleDir, binDir string) (string, error) {
	bin := filepath.Join(binDir, "txm-devchain")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/txm-devchain")
	cmd.Dir = moduleDir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build txm-devchain in %s: %w\n%s", moduleDir, err, out)
	}
	return bin, nil
}

// DevChainOptions describes a txm-devchain process.
type DevChainOptions struct {
	Bin           string
	BlockInterval time.Duration
	Accounts      int
	// Dir receives the log; empty means a temporary folder Stop removes.
	Dir string
}

// DevChain is a running txm-devchain: chain id 1337, deterministic funded accounts
// (chain.DevKey), blocks on a timer.
type DevChain struct {
	url     string
	dir     string
	ownsDir bool
	proc    *child
}

// StartDevChain starts the chain and waits until eth_chainId answers.
func StartDevChain(ctx context.Context, opts DevChainOptions) (*DevChain, error) {
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	dir, owned, err := ownedDir(opts.Dir, "txm-devchain-")
	if err != nil {
		return nil, err
	}
	interval := opts.BlockInterval
	if interval <= 0 {
		interval = time.Second
	}
	accounts := max(opts.Accounts, 1)
	proc, err := startChild("txm-devchain", filepath.Join(dir, "devchain.log"), os.Environ(), opts.Bin,
		"-http", addr, "-block-interval", interval.String(), "-accounts", strconv.Itoa(accounts))
	if err != nil {
		removeIfOwned(dir, owned)
		return nil, err
	}
	d := &DevChain{url: "http://" + addr, dir: dir, ownsDir: owned, proc: proc}
	if err := waitForRPC(ctx, d.url, proc, 60*time.Second); err != nil {
		proc.kill()
		removeIfOwned(dir, owned)
		return nil, err
	}
	return d, nil
}

// URL is the chain's JSON-RPC endpoint.
func (d *DevChain) URL() string { return d.url }

// LogPath is the file holding the chain's output.
func (d *DevChain) LogPath() string { return d.proc.logPath }

// Stop interrupts the chain and waits for it.
func (d *DevChain) Stop() error {
	err := d.proc.stop(syscall.SIGINT, 20*time.Second)
	removeIfOwned(d.dir, d.ownsDir)
	return err
}
