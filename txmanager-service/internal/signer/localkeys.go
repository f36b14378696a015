package signer

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"sync"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// errSourceClosed: the source's keys were wiped by its cleanup.
var errSourceClosed = errors.New("key source is closed")

// localKeys holds private keys in memory and signs with them. The raw and keystore sources
// share it so both sign exactly the same way.
type localKeys struct {
	mu    sync.RWMutex
	keys  map[common.Address]*ecdsa.PrivateKey // nil once wiped
	addrs []common.Address                     // sorted
}

// newLocalKeys indexes keys by address; an address given twice is an error because it
// usually means the same key was configured in two places.
func newLocalKeys(keys []*ecdsa.PrivateKey) (*localKeys, error) {
	lk := &localKeys{keys: make(map[common.Address]*ecdsa.PrivateKey, len(keys))}
	for _, key := range keys {
		if key == nil {
			return nil, errors.New("nil private key")
		}
		addr := crypto.PubkeyToAddress(key.PublicKey)
		if _, dup := lk.keys[addr]; dup {
			return nil, fmt.Errorf("key for %s given twice", addr.Hex())
		}
		lk.keys[addr] = key
		lk.addrs = append(lk.addrs, addr)
	}
	slices.SortFunc(lk.addrs, common.Address.Cmp)
	return lk, nil
}

func (lk *localKeys) Addresses() []common.Address { return slices.Clone(lk.addrs) }

func (lk *localKeys) SignTx(ctx context.Context, from common.Address, tx *types.Transaction, chainID *big.Int) (*types.Transaction, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if tx == nil {
		return nil, errors.New("nil transaction")
	}
	if err := checkChainID(chainID); err != nil {
		return nil, err
	}
	lk.mu.RLock()
	defer lk.mu.RUnlock()
	if lk.keys == nil {
		return nil, errSourceClosed
	}
	key, ok := lk.keys[from]
	if !ok {
		return nil, fmt.Errorf("sign for %s: %w", from.Hex(), domain.ErrUnknownSigner)
	}
	signed, err := types.SignTx(tx, types.LatestSignerForChainID(chainID), key)
	if err != nil {
		return nil, fmt.Errorf("sign for %s: %w", from.Hex(), err)
	}
	return signed, nil
}

// wipe zeroes the private scalars and forgets the keys. Only keys this package decrypted
// itself are wiped; keys handed in by a caller stay the caller's to manage.
func (lk *localKeys) wipe() {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	for _, key := range lk.keys {
		wipeKey(key)
	}
	lk.keys = nil
}

// checkChainID refuses a missing chain id, which would make go-ethereum fall back to
// replayable pre-EIP-155 signatures.
func checkChainID(chainID *big.Int) error {
	if chainID == nil || chainID.Sign() <= 0 {
		return errors.New("chain id must be positive")
	}
	return nil
}

// wipeKey zeroes a decrypted private key's scalar in memory once the key is no longer
// used, so it does not linger for a heap dump. Go 1.26 deprecates touching D because a
// modified key is invalid: here that is the point, and no other API clears it.
func wipeKey(key *ecdsa.PrivateKey) {
	clear(key.D.Bits()) //nolint:staticcheck // SA1019: see above
}
