package chain

import (
	"context"
	"fmt"
	"math/big"
	"sync/atomic"

	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/txmanager-service/internal/services"
)

var _ services.Chain = (*IdentityGate)(nil)

// IdentityGate holds every call to a chain whose identity is not yet proven: endpoints that
// did not answer at start may serve another chain when they come up, so nothing is read
// from or sent to them until they are shown to serve the configured one. Closed, every call
// fails at once with services.ErrNoChainEndpoint (retryable, a 503 to a client); Open lets
// calls through for good.
type IdentityGate struct {
	inner   services.Chain
	chainID uint64
	open    atomic.Bool
}

// NewIdentityGate is a closed gate in front of inner, the chain configured as chainID.
func NewIdentityGate(inner services.Chain, chainID uint64) *IdentityGate {
	return &IdentityGate{inner: inner, chainID: chainID}
}

// Open lets calls through: the endpoints were shown to serve the chain.
func (g *IdentityGate) Open() { g.open.Store(true) }

// IsOpen reports whether calls go through.
func (g *IdentityGate) IsOpen() bool { return g.open.Load() }

func (g *IdentityGate) closed() error {
	if g.open.Load() {
		return nil
	}
	return fmt.Errorf("%w: chain %d has not been verified since start (its endpoints did not answer, or serve another chain)", services.ErrNoChainEndpoint, g.chainID)
}

// Usable implements services.Chain.
func (g *IdentityGate) Usable() error {
	if err := g.closed(); err != nil {
		return err
	}
	return g.inner.Usable()
}

// PendingNonceAt implements services.Chain.
func (g *IdentityGate) PendingNonceAt(ctx context.Context, account common.Address) (uint64, error) {
	if err := g.closed(); err != nil {
		return 0, err
	}
	return g.inner.PendingNonceAt(ctx, account)
}

// BalanceAt implements services.Chain.
func (g *IdentityGate) BalanceAt(ctx context.Context, account common.Address) (*big.Int, error) {
	if err := g.closed(); err != nil {
		return nil, err
	}
	return g.inner.BalanceAt(ctx, account)
}

// EstimateGas implements services.Chain.
func (g *IdentityGate) EstimateGas(ctx context.Context, call services.CallRequest) (uint64, error) {
	if err := g.closed(); err != nil {
		return 0, err
	}
	return g.inner.EstimateGas(ctx, call)
}

// SuggestFees implements services.Chain.
func (g *IdentityGate) SuggestFees(ctx context.Context) (services.FeeSuggestion, error) {
	if err := g.closed(); err != nil {
		return services.FeeSuggestion{}, err
	}
	return g.inner.SuggestFees(ctx)
}

// SendRawTransactions implements services.Chain.
func (g *IdentityGate) SendRawTransactions(ctx context.Context, raws [][]byte) ([]error, error) {
	if err := g.closed(); err != nil {
		return nil, err
	}
	return g.inner.SendRawTransactions(ctx, raws)
}

// TransactionReceipts implements services.Chain.
func (g *IdentityGate) TransactionReceipts(ctx context.Context, hashes []common.Hash) ([]services.ReceiptResult, error) {
	if err := g.closed(); err != nil {
		return nil, err
	}
	return g.inner.TransactionReceipts(ctx, hashes)
}

// BlockReceipts implements services.Chain.
func (g *IdentityGate) BlockReceipts(ctx context.Context, numbers []uint64) ([][]services.Receipt, error) {
	if err := g.closed(); err != nil {
		return nil, err
	}
	return g.inner.BlockReceipts(ctx, numbers)
}

// TransactionsKnown implements services.Chain.
func (g *IdentityGate) TransactionsKnown(ctx context.Context, hashes []common.Hash) ([]bool, error) {
	if err := g.closed(); err != nil {
		return nil, err
	}
	return g.inner.TransactionsKnown(ctx, hashes)
}

// HeadersByNumber implements services.Chain.
func (g *IdentityGate) HeadersByNumber(ctx context.Context, numbers []uint64) ([]*services.BlockHeader, error) {
	if err := g.closed(); err != nil {
		return nil, err
	}
	return g.inner.HeadersByNumber(ctx, numbers)
}

// LatestHeader implements services.Chain.
func (g *IdentityGate) LatestHeader(ctx context.Context) (*services.BlockHeader, error) {
	if err := g.closed(); err != nil {
		return nil, err
	}
	return g.inner.LatestHeader(ctx)
}

// FinalizedHeader implements services.Chain.
func (g *IdentityGate) FinalizedHeader(ctx context.Context) (*services.BlockHeader, error) {
	if err := g.closed(); err != nil {
		return nil, err
	}
	return g.inner.FinalizedHeader(ctx)
}

// SentTransactions implements services.Chain.
func (g *IdentityGate) SentTransactions(ctx context.Context, from common.Address, nonces []uint64, maxBlocks uint64) (map[uint64]services.SentTx, error) {
	if err := g.closed(); err != nil {
		return nil, err
	}
	return g.inner.SentTransactions(ctx, from, nonces, maxBlocks)
}

// ScanSent implements services.Chain.
func (g *IdentityGate) ScanSent(ctx context.Context, from common.Address, first, maxBlocks, fromNonce uint64, limit int) (services.SentScan, error) {
	if err := g.closed(); err != nil {
		return services.SentScan{}, err
	}
	return g.inner.ScanSent(ctx, from, first, maxBlocks, fromNonce, limit)
}

// NonceAtBlock implements services.Chain.
func (g *IdentityGate) NonceAtBlock(ctx context.Context, account common.Address, block uint64) (uint64, error) {
	if err := g.closed(); err != nil {
		return 0, err
	}
	return g.inner.NonceAtBlock(ctx, account, block)
}
