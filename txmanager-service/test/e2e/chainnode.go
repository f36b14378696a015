package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/ethereum/go-ethereum/rpc"
)

// ChainNode is a running chain node (geth --dev or txm-devchain) that this process started,
// reachable over HTTP JSON-RPC on loopback only.
type ChainNode struct {
	url     string
	dir     string
	ownsDir bool
	proc    *child
	// sealer is the node's standard input when it seals blocks on demand (SealOnDemand).
	sealer *os.File
}

// startChainNode starts bin with args, its output in dir/logName, reads the JSON-RPC URL
// the node announces there (parseURL) and waits until eth_chainId answers; all of it within
// 60s. dir is removed on failure, and by Stop, when owned.
func startChainNode(ctx context.Context, name, dir string, owned bool, logName string, parseURL func(line string) (string, bool), bin string, args ...string) (*ChainNode, error) {
	return startChainNodeWithInput(ctx, name, dir, owned, logName, parseURL, nil, bin, args...)
}

// startChainNodeWithInput is startChainNode with stdin (nil: none) as the node's standard input.
func startChainNodeWithInput(ctx context.Context, name, dir string, owned bool, logName string, parseURL func(line string) (string, bool), stdin io.Reader, bin string, args ...string) (*ChainNode, error) {
	proc, err := startChildWithInput(name, filepath.Join(dir, logName), os.Environ(), nil, stdin, bin, args...)
	if err != nil {
		removeIfOwned(dir, owned)
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	url, err := waitForAnnouncement(ctx, proc, "its JSON-RPC endpoint", parseURL)
	if err == nil {
		err = waitForRPC(ctx, url, proc)
	}
	if err != nil {
		proc.kill()
		removeIfOwned(dir, owned)
		return nil, err
	}
	return &ChainNode{url: url, dir: dir, ownsDir: owned, proc: proc}, nil
}

// waitForRPC waits until the node at url answers eth_chainId, or its process exits.
func waitForRPC(ctx context.Context, url string, proc *child) error {
	var lastErr error
	for {
		if lastErr = chainIDAnswers(ctx, url); lastErr == nil {
			return nil
		}
		select {
		case <-proc.exited:
			return proc.exitedEarly()
		case <-ctx.Done():
			return fmt.Errorf("%s JSON-RPC at %s not answering (last error: %w): %w; log tail:\n%s",
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
func (n *ChainNode) URL() string { return n.url }

// PID is the node's process id.
func (n *ChainNode) PID() int { return n.proc.cmd.Process.Pid }

// Exited is closed when the node has exited.
func (n *ChainNode) Exited() <-chan struct{} { return n.proc.exited }

// Stop interrupts the node (geth flushes its state and exits within seconds), kills it
// after 20s, and removes its folder if this package made it.
func (n *ChainNode) Stop() error {
	err := n.proc.stop(syscall.SIGINT, 20*time.Second)
	if n.sealer != nil {
		_ = n.sealer.Close()
	}
	removeIfOwned(n.dir, n.ownsDir)
	return err
}
