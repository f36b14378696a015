package services

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// ChainServices are the use cases of one chain: its own leases, nonces, pipeline and
// chain connection behind them.
type ChainServices struct {
	ID     uint64
	Create *CreateTxUseCase
	Get    *GetTxUseCase
	Admin  *AdminUseCase
	// Conditions reads every signer's condition on the chain (readiness, gauges).
	Conditions *SignerConditions
	// Funds knows each signer's balance as the funds check last read it.
	Funds *FundsGuard
}

// Chains finds a chain's use cases by chain id. A deployment with one chain serves a
// request that names none on that chain, so single-chain clients need no change.
type Chains struct {
	byID map[uint64]*ChainServices
	ids  []uint64
}

// NewChains indexes the chains' use cases; ids must be distinct (configuration checks).
func NewChains(chains []*ChainServices) *Chains {
	c := &Chains{byID: make(map[uint64]*ChainServices, len(chains))}
	for _, ch := range chains {
		c.byID[ch.ID] = ch
		c.ids = append(c.ids, ch.ID)
	}
	slices.Sort(c.ids)
	return c
}

// Lookup returns the chain a request names (0: the only one). Naming no chain when there
// are several, or one not served here, is a validation error naming the served chains.
func (c *Chains) Lookup(id uint64) (*ChainServices, error) {
	if id == 0 {
		if len(c.ids) == 1 {
			return c.byID[c.ids[0]], nil
		}
		return nil, &domain.ValidationError{Field: "chainId", Reason: "required: this deployment serves chains " + c.served()}
	}
	if ch, ok := c.byID[id]; ok {
		return ch, nil
	}
	return nil, &domain.ValidationError{Field: "chainId", Reason: fmt.Sprintf("chain %d is not served here (served: %s)", id, c.served())}
}

// Any is one chain's use cases, for what does not depend on the chain (a transaction by
// id, the node list).
func (c *Chains) Any() *ChainServices { return c.byID[c.ids[0]] }

// IDs are the served chain ids in ascending order.
func (c *Chains) IDs() []uint64 { return slices.Clone(c.ids) }

func (c *Chains) served() string {
	names := make([]string, len(c.ids))
	for i, id := range c.ids {
		names[i] = strconv.FormatUint(id, 10)
	}
	return strings.Join(names, ", ")
}
