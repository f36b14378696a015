package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/rpc"
)

// AnvilVersion is the release of anvil (foundry's development node: another EVM and
// another transaction pool than go-ethereum's) the suites run as their second node.
// TestBinariesTarget unpacks it from the npm package AnvilPackage.
const AnvilVersion = "1.7.1"

// AnvilPackage is the npm package that carries the anvil binary for this machine.
const AnvilPackage = "@foundry-rs/anvil-linux-amd64"

// FindAnvil is the anvil TestBinariesTarget unpacked into TestBinDir, checked to be
// AnvilVersion; the error says how to get it.
func FindAnvil() (string, error) {
	root, err := FindRepo("", "go.work")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(root, TestBinDir, "anvil")
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("anvil %s is not unpacked at %s (%w): run `%s`", AnvilVersion, bin, err, TestBinariesTarget)
	}
	if !strings.Contains(string(out), "Version: "+AnvilVersion) {
		return "", fmt.Errorf("%s is %q, the tests need anvil %s: run `%s`", bin, strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0]), AnvilVersion, TestBinariesTarget)
	}
	return bin, nil
}

// AnvilOptions configures StartAnvil.
type AnvilOptions struct {
	// Bin is the anvil binary (FindAnvil).
	Bin string
	// BlockTime seals a block this often (whole seconds); 0 seals only when asked (Mine).
	BlockTime time.Duration
	// ChainID the node runs under (0 keeps anvil's 31337).
	ChainID uint64
	// Optimism applies the OP-stack's rules (deposit transactions, the L1 data fee).
	Optimism bool
	// Dir holds the node's log; empty makes a temporary one, removed by Stop.
	Dir string
	// StateFile, when set, is loaded at start and written at a clean stop (anvil --state):
	// a restart on it continues the chain (blocks, balances, nonces) but not the mempool.
	StateFile string
	// ExtraArgs are passed to anvil as they are.
	ExtraArgs []string
}

// StartAnvil starts anvil on a loopback port the kernel picks and waits until eth_chainId
// answers. Its ten accounts are funded from anvil's own mnemonic; fund others with
// SetBalance. ctx bounds only the start-up.
func StartAnvil(ctx context.Context, opts AnvilOptions) (*ChainNode, error) {
	if opts.BlockTime%time.Second != 0 {
		return nil, fmt.Errorf("anvil --block-time is whole seconds here, not %s", opts.BlockTime)
	}
	dir, owned, err := ownedDir(opts.Dir, "txm-anvil-")
	if err != nil {
		return nil, err
	}
	args := []string{"--host", "127.0.0.1", "--port", "0"}
	if opts.BlockTime > 0 {
		args = append(args, "--block-time", strconv.Itoa(int(opts.BlockTime/time.Second)))
	} else {
		args = append(args, "--no-mining")
	}
	if opts.ChainID > 0 {
		args = append(args, "--chain-id", strconv.FormatUint(opts.ChainID, 10))
	}
	if opts.Optimism {
		args = append(args, "--optimism")
	}
	if opts.StateFile != "" {
		args = append(args, "--state", opts.StateFile)
	}
	return startChainNode(ctx, "anvil", dir, owned, "anvil.log", parseAnvilListenLine, opts.Bin, append(args, opts.ExtraArgs...)...)
}

// anvilListenLine matches what anvil prints once it serves: "Listening on 127.0.0.1:41783".
var anvilListenLine = regexp.MustCompile(`^Listening on (\S+:\d+)\s*$`)

func parseAnvilListenLine(line string) (string, bool) {
	m := anvilListenLine.FindStringSubmatch(line)
	if m == nil {
		return "", false
	}
	return "http://" + m[1], true
}

// SetBalance sets addr's balance on an anvil node (anvil_setBalance).
func SetBalance(ctx context.Context, url string, addr common.Address, wei *hexutil.Big) error {
	return anvilCall(ctx, url, nil, "anvil_setBalance", addr, wei)
}

// Mine seals one block on an anvil node (evm_mine).
func Mine(ctx context.Context, url string) error {
	return anvilCall(ctx, url, nil, "evm_mine")
}

func anvilCall(ctx context.Context, url string, result any, method string, args ...any) error {
	client, err := rpc.DialContext(ctx, url)
	if err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	defer client.Close()
	if err := client.CallContext(ctx, result, method, args...); err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	return nil
}

// SetStorageAt sets one storage slot of addr on an anvil node (anvil_setStorageAt).
func SetStorageAt(ctx context.Context, url string, addr common.Address, slot, value common.Hash) error {
	return anvilCall(ctx, url, nil, "anvil_setStorageAt", addr, slot, value)
}

// DropAllTransactions empties an anvil node's pool (anvil_dropAllTransactions), as a node
// restart or a provider's failover loses a mempool.
func DropAllTransactions(ctx context.Context, url string) error {
	return anvilCall(ctx, url, nil, "anvil_dropAllTransactions")
}

// SetBlockGasLimit sets the gas limit of an anvil node's next blocks (evm_setBlockGasLimit).
func SetBlockGasLimit(ctx context.Context, url string, gas uint64) error {
	return anvilCall(ctx, url, nil, "evm_setBlockGasLimit", hexutil.Uint64(gas))
}
