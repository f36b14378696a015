package e2e

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
)

// BuildDevChain compiles test/cmd/txm-devchain (the embedded simulated chain as a loopback
// JSON-RPC node) of the service module at moduleDir into binDir.
func BuildDevChain(ctx context.Context, moduleDir, binDir string) (string, error) {
	return buildCommand(ctx, moduleDir, binDir, "test/cmd/txm-devchain")
}

// DevChainOptions describes a txm-devchain process.
type DevChainOptions struct {
	Bin           string
	BlockInterval time.Duration
	Accounts      int
	// Dir receives the log; empty means a temporary folder Stop removes.
	Dir string
	// ChainID is the chain's id (0: 1337); Fund are further addresses funded at genesis.
	ChainID uint64
	Fund    []common.Address
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
	args := []string{"-http", "127.0.0.1:0", "-block-interval", interval.String(), "-accounts", strconv.Itoa(accounts)}
	if opts.ChainID != 0 {
		args = append(args, "-chain-id", strconv.FormatUint(opts.ChainID, 10))
	}
	if len(opts.Fund) > 0 {
		fund := make([]string, len(opts.Fund))
		for i, a := range opts.Fund {
			fund[i] = a.Hex()
		}
		args = append(args, "-fund", strings.Join(fund, ","))
	}
	return startChainNode(ctx, "txm-devchain", dir, owned, "devchain.log", parseDevChainLine, opts.Bin, args...)
}
