package services

import (
	"context"
	"errors"
	"fmt"
)

// ChainIdentity is what makes a chain that chain: its id (decimal) and its genesis hash (0x hex).
type ChainIdentity struct {
	ChainID     string
	GenesisHash string
}

// ChainIdentityStore keeps the chain a database belongs to.
type ChainIdentityStore interface {
	Record(ctx context.Context, id ChainIdentity) error
	List(ctx context.Context) ([]ChainIdentity, error)
}

// ErrOtherChain: the endpoints serve another chain than the database was used with.
var ErrOtherChain = errors.New("the chain endpoints serve another chain than this database belongs to")

// VerifyChainIdentity records a chain on its first start and refuses every later start
// against another chain under the same id (a chain that was reset): the rows would expect
// nonces and blocks that chain does not have. A chain id the database has not seen is
// recorded when addsChains (the configuration names its chains, so a new one was added on
// purpose) or when the database has none yet; otherwise it is another network and refused.
func VerifyChainIdentity(ctx context.Context, store ChainIdentityStore, serving ChainIdentity, addsChains bool) error {
	recorded, err := store.List(ctx)
	if err != nil {
		return err
	}
	known := false
	for _, r := range recorded {
		known = known || r.ChainID == serving.ChainID
	}
	if len(recorded) == 0 || (addsChains && !known) {
		if err := store.Record(ctx, serving); err != nil {
			return err
		}
		// Another node may have recorded its chain first.
		if recorded, err = store.List(ctx); err != nil {
			return err
		}
	}
	for _, r := range recorded {
		if r == serving {
			return nil
		}
	}
	for _, r := range recorded {
		if r.ChainID == serving.ChainID {
			return fmt.Errorf("%w: the database belongs to chain id %s with genesis %s, the endpoints serve chain id %s with genesis %s (the chain was reset)",
				ErrOtherChain, r.ChainID, r.GenesisHash, serving.ChainID, serving.GenesisHash)
		}
	}
	return fmt.Errorf("%w: the database belongs to chain id %s (genesis %s), the endpoints serve chain id %s (genesis %s); to serve several chains, name each under chains: with its id",
		ErrOtherChain, recorded[0].ChainID, recorded[0].GenesisHash, serving.ChainID, serving.GenesisHash)
}
