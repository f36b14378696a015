package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/rpc"
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
	// SealOnDemand: no blocks on a timer; each ChainNode.Seal seals one (a benchmark that
	// decides when blocks come, with the chain's CPU in a process of its own).
	SealOnDemand bool
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
	if opts.SealOnDemand {
		interval = 0
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
	if !opts.SealOnDemand {
		return startChainNode(ctx, "txm-devchain", dir, owned, "devchain.log", parseDevChainLine, opts.Bin, args...)
	}
	commands, sealer, err := os.Pipe()
	if err != nil {
		removeIfOwned(dir, owned)
		return nil, fmt.Errorf("txm-devchain: %w", err)
	}
	node, err := startChainNodeWithInput(ctx, "txm-devchain", dir, owned, "devchain.log", parseDevChainLine, commands, opts.Bin, append(args, "-seal-on-stdin")...)
	// The child holds its own copy of the reading end.
	_ = commands.Close()
	if err != nil {
		_ = sealer.Close()
		return nil, err
	}
	node.sealer = sealer
	return node, nil
}

// Seal has a node started with SealOnDemand seal one block and waits until the node's
// head is past the head it had before.
func (n *ChainNode) Seal(ctx context.Context) error {
	if n.sealer == nil {
		return errors.New("seal: the node was not started with SealOnDemand")
	}
	client, err := rpc.DialContext(ctx, n.url)
	if err != nil {
		return fmt.Errorf("seal: %w", err)
	}
	defer client.Close()
	head := func() (uint64, error) {
		var number hexutil.Uint64
		err := client.CallContext(ctx, &number, "eth_blockNumber")
		return uint64(number), err
	}
	before, err := head()
	if err != nil {
		return fmt.Errorf("seal: head before: %w", err)
	}
	if _, err := io.WriteString(n.sealer, "seal\n"); err != nil {
		return fmt.Errorf("seal: %w", err)
	}
	for {
		now, err := head()
		if err != nil {
			return fmt.Errorf("seal: head after: %w", err)
		}
		if now > before {
			return nil
		}
		select {
		case <-n.proc.exited:
			return n.proc.exitedEarly()
		case <-ctx.Done():
			return fmt.Errorf("seal: block %d not sealed: %w", before+1, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
}
