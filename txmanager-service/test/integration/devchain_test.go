package integration

import (
	"context"
	"crypto/ecdsa"
	"math/big"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/test/e2e"
)

// devChain is a development node a test drives, reached over loopback JSON-RPC like any
// node: go-ethereum's simulated backend (*chain.SimulatedChain) or anvil (anvilChain). Both
// run under chain id chain.SimulatedChainID with the same funded development keys, so a
// test written against devChain runs unchanged on either.
type devChain interface {
	HTTPEndpoint() string
	DevKeys() []*ecdsa.PrivateKey
	DevAddresses() []common.Address
	// Commit seals a block and returns its hash.
	Commit() common.Hash
	BalanceAt(ctx context.Context, account common.Address) (*big.Int, error)
	NonceAt(ctx context.Context, account common.Address) (uint64, error)
	PendingNonceAt(ctx context.Context, account common.Address) (uint64, error)
	SendRawTransaction(ctx context.Context, raw []byte) error
	SuggestFees(ctx context.Context) (services.FeeSuggestion, error)
	TransactionReceipts(ctx context.Context, hashes []common.Hash) ([]services.ReceiptResult, error)
}

var (
	_ devChain = (*chain.SimulatedChain)(nil)
	_ devChain = (*anvilChain)(nil)
)

// chainClients are the node implementations the tests that take one run on: both by
// default (make test), one when CHAIN_CLIENT names it.
func chainClients() []string {
	switch client := os.Getenv("CHAIN_CLIENT"); client {
	case "geth", "anvil":
		return []string{client}
	default:
		return []string{"geth", "anvil"}
	}
}

// onEveryNode runs test once per node implementation (chainClients), each as a subtest
// named after it, on a fresh chain sealing a block every blockInterval (0: only when the
// test commits).
func onEveryNode(t *testing.T, blockInterval time.Duration, test func(t *testing.T, c devChain)) {
	for _, client := range chainClients() {
		t.Run(client, func(t *testing.T) {
			t.Parallel()
			test(t, newDevChain(t, client, blockInterval))
		})
	}
}

// newDevChain starts a fresh chain of the client's implementation.
func newDevChain(t *testing.T, client string, blockInterval time.Duration) devChain {
	t.Helper()
	if client == "anvil" {
		return startAnvilChain(t, blockInterval)
	}
	return newTestChain(t, blockInterval)
}

// anvilChain is anvil (`make test-binaries` unpacks it) as a devChain: it mines only when
// asked, by Commit or by the test's own timer every blockInterval (anvil's own block time
// is whole seconds), and the development keys are funded with anvil_setBalance.
type anvilChain struct {
	*chain.RPCChain
	url  string
	keys []*ecdsa.PrivateKey
	// mu orders Commit against the timer's blocks.
	mu sync.Mutex
}

// devKeyCount and devKeyBalance match the simulated chain the tests use (newTestChain).
const devKeyCount = 8

// startAnvilChain starts anvil as a devChain; extraArgs go to anvil as they are (a block
// gas limit, say).
func startAnvilChain(t *testing.T, blockInterval time.Duration, extraArgs ...string) *anvilChain {
	t.Helper()
	ctx := context.Background()
	bin, err := e2e.FindAnvil()
	if err != nil {
		t.Fatal(err)
	}
	node, err := e2e.StartAnvil(ctx, e2e.AnvilOptions{Bin: bin, ChainID: chain.SimulatedChainID, ExtraArgs: extraArgs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = node.Stop() })
	rpcChain, err := chain.DialRPC(ctx, node.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rpcChain.Close)
	c := &anvilChain{RPCChain: rpcChain, url: node.URL()}
	balance := (*hexutil.Big)(new(big.Int).Exp(big.NewInt(10), big.NewInt(24), nil))
	for i := range devKeyCount {
		key, err := chain.DevKey(i)
		if err != nil {
			t.Fatal(err)
		}
		if err := e2e.SetBalance(ctx, node.URL(), crypto.PubkeyToAddress(key.PublicKey), balance); err != nil {
			t.Fatal(err)
		}
		c.keys = append(c.keys, key)
	}
	c.Commit() // a head with a current timestamp, as newTestChain gives
	if blockInterval > 0 {
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			tick := time.NewTicker(blockInterval)
			defer tick.Stop()
			for {
				select {
				case <-stop:
					return
				case <-tick.C:
					c.Commit()
				}
			}
		}()
		t.Cleanup(func() { close(stop); <-done })
	}
	return c
}

func (c *anvilChain) HTTPEndpoint() string { return c.url }

func (c *anvilChain) DevKeys() []*ecdsa.PrivateKey { return c.keys }

func (c *anvilChain) DevAddresses() []common.Address {
	out := make([]common.Address, len(c.keys))
	for i, key := range c.keys {
		out[i] = crypto.PubkeyToAddress(key.PublicKey)
	}
	return out
}

// Commit mines one block (evm_mine) and returns the new head's hash (zero when it cannot be
// read: a stopped node).
func (c *anvilChain) Commit() common.Hash {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := e2e.Mine(context.Background(), c.url); err != nil {
		return common.Hash{}
	}
	head, err := c.LatestHeader(context.Background())
	if err != nil {
		return common.Hash{}
	}
	return head.Hash
}

// dropPending empties the node's pool: every pending transaction is gone, as after a node
// restart (go-ethereum's simulated backend rolls its pending block back; anvil drops them).
func dropPending(t *testing.T, c devChain) {
	t.Helper()
	switch node := c.(type) {
	case *chain.SimulatedChain:
		node.Backend().Rollback()
	case *anvilChain:
		if err := e2e.DropAllTransactions(context.Background(), node.url); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("dropPending: no way to empty the pool of %T", c)
	}
}
