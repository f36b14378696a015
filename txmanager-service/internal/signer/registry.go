package signer

import (
	"context"
	"fmt"
	"math/big"
	"slices"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// Source is one place keys live. It signs only for the addresses it lists and answers
// any other address with an error matching domain.ErrUnknownSigner.
type Source interface {
	// Addresses lists the signers the source holds keys for.
	Addresses() []common.Address
	// SignTx returns tx signed by from for chainID.
	SignTx(ctx context.Context, from common.Address, tx *types.Transaction, chainID *big.Int) (*types.Transaction, error)
}

// Registry is the set of signers this service manages, each owned by exactly one source.
// It implements services.TxSigner and services.SignerDirectory and is immutable, so it is
// safe for concurrent use.
type Registry struct {
	// owners maps each managed signer to its source; a nil source means the address is
	// managed but no key is held (NewRegistry).
	owners map[common.Address]Source
	addrs  []common.Address // sorted
}

// NewRegistryFromSources joins sources. Two sources claiming the same address is an
// error: which key signs must never depend on map order.
func NewRegistryFromSources(sources ...Source) (*Registry, error) {
	r := &Registry{owners: make(map[common.Address]Source)}
	for i, src := range sources {
		if src == nil {
			return nil, fmt.Errorf("signer source %d is nil", i)
		}
		for _, addr := range src.Addresses() {
			if _, dup := r.owners[addr]; dup {
				return nil, fmt.Errorf("signer %s is held by more than one key source", addr.Hex())
			}
			r.owners[addr] = src
			r.addrs = append(r.addrs, addr)
		}
	}
	slices.SortFunc(r.addrs, common.Address.Cmp)
	return r, nil
}

// NewRegistry manages addrs without holding their keys: Manages answers true and SignTx
// fails with domain.ErrUnknownSigner. It keeps callers that only need the directory
// working; use NewFromConfig to sign.
func NewRegistry(addrs []common.Address) *Registry {
	r := &Registry{owners: make(map[common.Address]Source, len(addrs))}
	for _, addr := range addrs {
		if _, dup := r.owners[addr]; !dup {
			r.owners[addr] = nil
			r.addrs = append(r.addrs, addr)
		}
	}
	slices.SortFunc(r.addrs, common.Address.Cmp)
	return r
}

// Manages implements services.SignerDirectory.
func (r *Registry) Manages(addr common.Address) bool {
	_, ok := r.owners[addr]
	return ok
}

// Addresses lists the managed signers, sorted.
func (r *Registry) Addresses() []common.Address { return slices.Clone(r.addrs) }

// SignTx implements services.TxSigner by handing tx to the source that holds from.
func (r *Registry) SignTx(ctx context.Context, from common.Address, tx *types.Transaction, chainID *big.Int) (*types.Transaction, error) {
	src := r.owners[from]
	if src == nil {
		return nil, fmt.Errorf("sign for %s: no key source holds it: %w", from.Hex(), domain.ErrUnknownSigner)
	}
	return src.SignTx(ctx, from, tx, chainID)
}

// pacedSource is a Source that takes a limited number of signatures at once.
type pacedSource interface {
	MaxInFlight() int
}

// MaxInFlight implements services.SigningPace: the limit of the source holding from, or
// 0 when it has none.
func (r *Registry) MaxInFlight(from common.Address) int {
	if paced, ok := r.owners[from].(pacedSource); ok {
		return paced.MaxInFlight()
	}
	return 0
}
