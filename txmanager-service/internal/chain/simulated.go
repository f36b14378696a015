package chain

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"errors"
	"fmt"
	"math/big"
	"sync"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/eth/ethconfig"
	"github.com/ethereum/go-ethereum/ethclient/simulated"
	"github.com/ethereum/go-ethereum/node"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/bionicotaku/txmanager-service/internal/services"
)

// SimulatedChainID is the chain id go-ethereum's simulated backend always uses.
const SimulatedChainID = 1337

const defaultDevAccounts = 10

// DevAccountsOrDefault is how many development accounts an embedded chain configured with
// count funds (0 means the default).
func DevAccountsOrDefault(count int) int {
	if count == 0 {
		return defaultDevAccounts
	}
	return count
}

var _ services.Chain = (*SimulatedChain)(nil)

// SimulatedConfig describes an in-process development chain.
type SimulatedConfig struct {
	// BlockInterval seals a block this often; 0 seals only on Commit. Every block is at
	// least one second after its parent, so intervals under a second push block
	// timestamps ahead of the wall clock.
	BlockInterval time.Duration
	// DevAccounts is how many deterministic funded accounts to create (0 means 10).
	DevAccounts int
	// Balance of every funded account in wei (nil means 1e24).
	Balance *big.Int
	// ExtraFunded are further addresses funded with Balance at genesis.
	ExtraFunded []common.Address
	// HTTPAddr, when set, serves the node's JSON-RPC (eth, net, web3) on host:port.
	// Port 0 picks a free port; HTTPEndpoint reports it.
	HTTPAddr string
	// ChainID the chain runs under (0 keeps go-ethereum's development chain id, 1337), so
	// several embedded chains in one process are told apart like real networks.
	ChainID uint64
	// GasLimit of every block (0 keeps go-ethereum's default).
	GasLimit uint64
	// BatchRequestLimit caps the calls of one JSON-RPC batch the HTTP endpoint serves, as
	// go-ethereum's --rpc.batch-request-limit does (0 keeps its default, 1,000).
	BatchRequestLimit int
	// RPCOptions tune the adapter the chain is served through (a tracer, a batch size).
	RPCOptions []RPCOption
	// TxPoolSlots raises the transaction pool's pending and queued capacity, per account and
	// in total, for load tests that keep thousands of transactions in flight (0 keeps
	// go-ethereum's defaults: 16 per account, 5,120 in all).
	TxPoolSlots uint64
}

// SimulatedChain is an in-process go-ethereum chain serving services.Chain through the
// same RPCChain adapter real nodes get, so tests exercise the production code path.
type SimulatedChain struct {
	*RPCChain

	backend      *simulated.Backend
	devKeys      []*ecdsa.PrivateKey
	httpEndpoint string

	// sealMu serialises block production: the simulated beacon has no locking of its own,
	// and the interval miner and Commit would otherwise race on its fork-choice state.
	sealMu sync.Mutex
	closed bool // guarded by sealMu; the backend panics if asked to seal after Close
	miner  *intervalMiner

	closeOnce sync.Once
	closeErr  error
}

// NewSimulated starts a simulated chain; Close it to stop mining and release the node.
func NewSimulated(cfg SimulatedConfig) (*SimulatedChain, error) {
	if cfg.DevAccounts < 0 {
		return nil, fmt.Errorf("simulated chain: DevAccounts %d is negative", cfg.DevAccounts)
	}
	if cfg.BlockInterval < 0 {
		return nil, fmt.Errorf("simulated chain: BlockInterval %s is negative", cfg.BlockInterval)
	}
	accounts := DevAccountsOrDefault(cfg.DevAccounts)
	keys, err := DevKeys(accounts)
	if err != nil {
		return nil, fmt.Errorf("simulated chain: %w", err)
	}
	alloc := genesisAlloc(keys, cfg.ExtraFunded, cfg.Balance)

	// Every start is a new chain and must look like one: a random genesis extra-data makes
	// the genesis hash differ, so a database that served an earlier run of the embedded
	// chain (whose blocks and nonces are gone) is refused at start instead of stalling.
	instance := make([]byte, 32)
	if _, err := rand.Read(instance); err != nil {
		return nil, fmt.Errorf("simulated chain: %w", err)
	}
	options := []simulatedOption{func(_ *node.Config, eth *ethconfig.Config) {
		eth.Genesis.ExtraData = instance
		// Dated now, as a dev node's genesis is: a chain that has not sealed its first block
		// yet is not taken for a stalled one (readiness, and the gRPC health checks clients
		// pick a connection by).
		eth.Genesis.Timestamp = uint64(time.Now().Unix())
	}}
	if cfg.ChainID > 0 {
		options = append(options, func(_ *node.Config, eth *ethconfig.Config) {
			chainConfig := *eth.Genesis.Config
			chainConfig.ChainID = new(big.Int).SetUint64(cfg.ChainID)
			eth.Genesis.Config = &chainConfig
			eth.NetworkId = cfg.ChainID
		})
	}
	if cfg.BatchRequestLimit > 0 {
		options = append(options, func(n *node.Config, _ *ethconfig.Config) { n.BatchRequestLimit = cfg.BatchRequestLimit })
	}
	if cfg.GasLimit > 0 {
		options = append(options, simulated.WithBlockGasLimit(cfg.GasLimit))
	}
	if cfg.TxPoolSlots > 0 {
		options = append(options, func(_ *node.Config, eth *ethconfig.Config) {
			eth.TxPool.AccountSlots, eth.TxPool.GlobalSlots = cfg.TxPoolSlots, cfg.TxPoolSlots
			eth.TxPool.AccountQueue, eth.TxPool.GlobalQueue = cfg.TxPoolSlots, cfg.TxPoolSlots
		})
	}
	backend, httpEndpoint, err := startBackend(alloc, options, cfg.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("simulated chain: %w", err)
	}

	rpcClient, err := rpcClientOf(backend.Client())
	if err != nil {
		return nil, errors.Join(fmt.Errorf("simulated chain: %w", err), backend.Close())
	}
	sim := &SimulatedChain{
		RPCChain:     NewRPCChain(rpcClient, cfg.RPCOptions...),
		backend:      backend,
		devKeys:      keys,
		httpEndpoint: httpEndpoint,
	}
	if cfg.BlockInterval > 0 {
		sim.miner = startIntervalMiner(cfg.BlockInterval, func() { sim.Commit() })
	}
	return sim, nil
}

func genesisAlloc(keys []*ecdsa.PrivateKey, extra []common.Address, balance *big.Int) types.GenesisAlloc {
	if balance == nil {
		balance = new(big.Int).Exp(big.NewInt(10), big.NewInt(24), nil)
	}
	alloc := make(types.GenesisAlloc, len(keys)+len(extra))
	fund := func(addr common.Address) {
		// Each account gets its own copy: genesis code may keep and mutate the pointer.
		alloc[addr] = types.Account{Balance: new(big.Int).Set(balance)}
	}
	for _, key := range keys {
		fund(crypto.PubkeyToAddress(key.PublicKey))
	}
	for _, addr := range extra {
		fund(addr)
	}
	return alloc
}

// Close stops the interval miner, waits for it, then shuts the node down. Safe to call
// more than once.
func (s *SimulatedChain) Close() error {
	s.closeOnce.Do(func() {
		if s.miner != nil {
			s.miner.Stop()
		}
		s.sealMu.Lock()
		defer s.sealMu.Unlock()
		s.closed = true
		s.closeErr = s.backend.Close()
	})
	return s.closeErr
}

// Commit seals the pending transactions into a new block and returns its hash; after
// Close it does nothing and returns the zero hash.
func (s *SimulatedChain) Commit() common.Hash {
	s.sealMu.Lock()
	defer s.sealMu.Unlock()
	if s.closed {
		return common.Hash{}
	}
	return s.backend.Commit()
}

// Backend gives tests the simulated node's controls (Fork, Rollback, AdjustTime). With a
// BlockInterval set, its Commit bypasses the lock the miner uses; call s.Commit instead.
func (s *SimulatedChain) Backend() *simulated.Backend {
	return s.backend
}

// SetPoolMinimumTip makes the node's transaction pool refuse transactions that tip less
// than tip ("transaction gas price below minimum") while its fee suggestion stays where it
// was: a node whose floor is above the market it reports, as a private or L2 node may be.
func (s *SimulatedChain) SetPoolMinimumTip(ctx context.Context, tip *big.Int) error {
	var ok bool
	if err := s.rpcClient.CallContext(ctx, &ok, "miner_setGasPrice", (*hexutil.Big)(tip)); err != nil {
		return fmt.Errorf("simulated chain: set the pool's minimum tip: %w", err)
	}
	if !ok {
		return errors.New("simulated chain: the node did not take the pool's minimum tip")
	}
	return nil
}

// RPCClient is the in-process client the adapter uses, for calls outside services.Chain
// or for adapters built with other options. It is closed by Close.
func (s *SimulatedChain) RPCClient() *rpc.Client {
	return s.rpcClient
}

// DevKeys returns the funded development keys, in index order.
func (s *SimulatedChain) DevKeys() []*ecdsa.PrivateKey {
	return append([]*ecdsa.PrivateKey(nil), s.devKeys...)
}

// DevAddresses returns the addresses of DevKeys, in the same order.
func (s *SimulatedChain) DevAddresses() []common.Address {
	addrs := make([]common.Address, len(s.devKeys))
	for i, key := range s.devKeys {
		addrs[i] = crypto.PubkeyToAddress(key.PublicKey)
	}
	return addrs
}

// HTTPEndpoint is "http://host:port" when HTTPAddr was set, "" otherwise.
func (s *SimulatedChain) HTTPEndpoint() string {
	return s.httpEndpoint
}
