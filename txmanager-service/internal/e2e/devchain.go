package e2e

import (
	"context"
	"strconv"
	"time"
)

// BuildDevChain compiles cmd/txm-devchain (the embedded simulated chain as a loopback
// JSON-RPC node) of the service module at moduleDir into binDir.
func BuildDevChain(ctx context.Context, moduleDir, binDir string) (string, error) {
	return buildCommand(ctx, moduleDir, binDir, "txm-devchain")
}

// DevChainOptions describes a txm-devchain process.
type DevChainOptions struct {
	Bin           string
	BlockInterval time.Duration
	Accounts      int
	// Dir receives the log; empty means a temporary folder Stop removes.
	Dir string
}

// StartDevChain starts a txm-devchain (chain id 1337, deterministic funded accounts
// (chain.DevKey), blocks on a timer) on a port the kernel picks and waits until
// eth_chainId answers.
func StartDevChain(ctx context.Context, opts DevChainOptions) (*ChainNode, error) {
	dir, owned, err := ownedDir(opts.Dir, "txm-devchain-")
	if err != nil {
		return nil, err
	}
	interval := opts.BlockInterval
	if interval <= 0 {
		interval = time.Second
	}
	accounts := max(opts.Accounts, 1)
	return startChainNode(ctx, "txm-devchain", dir, owned, "devchain.log", parseDevChainLine, opts.Bin,
		"-http", "127.0.0.1:0", "-block-interval", interval.String(), "-accounts", strconv.Itoa(accounts))
}
