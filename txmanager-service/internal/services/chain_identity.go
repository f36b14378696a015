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

// VerifyChainIdentity records the chain on a database's first start and refuses every
// later start against another chain (another network, or a chain that was reset): the
// rows would expect nonces and blocks that chain does not have.
func VerifyChainIdentity(ctx context.Context, store ChainIdentityStore, serving ChainIdentity) error {
	recorded, err := store.List(ctx)
	if err != nil {
		return err
	}
	if len(recorded) == 0 {
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
	return fmt.Errorf("%w: the database belongs to chain id %s (genesis %s), the endpoints serve chain id %s (genesis %s)",
		ErrOtherChain, recorded[0].ChainID, recorded[0].GenesisHash, serving.ChainID, serving.GenesisHash)
}
