// Package signer holds the keys the service signs with and answers which signers it
// manages.
package signer

import (
	"sort"

	"github.com/ethereum/go-ethereum/common"
)

// Registry is the set of signers this service manages.
type Registry struct {
	signers map[common.Address]struct{}
}

// NewRegistry builds a registry of addrs.
func NewRegistry(addrs []common.Address) *Registry {
	r := &Registry{signers: make(map[common.Address]struct{}, len(addrs))}
	for _, a := range addrs {
		r.signers[a] = struct{}{}
	}
	return r
}

// Manages implements services.SignerDirectory.
func (r *Registry) Manages(addr common.Address) bool {
	_, ok := r.signers[addr]
	return ok
}

// Addresses lists the managed signers in a stable order.
func (r *Registry) Addresses() []common.Address {
	out := make([]common.Address, 0, len(r.signers))
	for a := range r.signers {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Cmp(out[j]) < 0 })
	return out
}
