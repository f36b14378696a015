package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// GethModuleVersion is the geth release the suite runs against. Later releases need a
// module the Go proxy reachable here refuses, so this is pinned, not "latest".
const GethModuleVersion = "v1.17.8"

// BuildGeth installs geth GethModuleVersion into binDir from the Go module proxy, unless
// binDir already holds that version (the first build takes minutes). It returns the binary
// and the version it reports ("1.17.8-stable").
func BuildGeth(ctx context.Context, binDir string) (bin, version string, err error) {
	if bin, err = InstallGoTool(ctx, binDir, "github.com/ethereum/go-ethereum/cmd/geth", GethModuleVersion); err != nil {
		return "", "", fmt.Errorf("build geth: %w", err)
	}
	if version, err = gethVersion(ctx, bin); err != nil {
		return "", "", err
	}
	return bin, version, nil
}

// gethVersion is the version geth at bin reports ("1.17.8-stable").
func gethVersion(ctx context.Context, bin string) (string, error) {
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
	// removes. Starting again with the same Dir continues the same chain.
	Dir string
	// ExtraArgs are appended to the command line (e.g. --txpool.nolocals, so a restart
	// loses the mempool as a production node's would).
	ExtraArgs []string
	// DebugAPI serves the debug namespace over HTTP too (debug_startCPUProfile: a benchmark
	// profiles the node).
	DebugAPI bool
}

func httpAPIs(debug bool) string {
	if debug {
		return "eth,net,web3,txpool,debug"
	}
	return "eth,net,web3,txpool"
}

// StartGeth starts a fresh `geth --dev` chain (chain id 1337, one prefunded unlocked
// account) on a port the kernel picks and waits until eth_chainId answers. ctx bounds only the start-up.
func StartGeth(ctx context.Context, opts GethOptions) (*ChainNode, error) {
	period := opts.Period
	if period <= 0 {
		period = time.Second
	}
	if period%time.Second != 0 {
		return nil, fmt.Errorf("geth --dev.period is whole seconds, not %s", period)
	}
	dir, owned, err := ownedDir(opts.Dir, "txm-e2e-geth-")
	if err != nil {
		return nil, err
	}
	args := []string{
		"--dev", "--dev.period", strconv.Itoa(int(period / time.Second)),
		"--datadir", filepath.Join(dir, "data"),
		// Port 0: geth binds whatever the kernel gives and logs it ("HTTP server started
		// endpoint=..."), which is where the URL is read from.
		"--http", "--http.addr", "127.0.0.1", "--http.port", "0", "--http.api", httpAPIs(opts.DebugAPI),
		// No peers, no discovery, no IPC socket: nothing outside loopback HTTP. (--dev
		// already sets maxpeers 0 and starts no engine API; these make it explicit.)
		"--port", "0", "--nodiscover", "--maxpeers", "0", "--ipcdisable",
	}
	return startChainNode(ctx, "geth", dir, owned, "geth.log", parseGethHTTPLine, opts.Bin, append(args, opts.ExtraArgs...)...)
}
