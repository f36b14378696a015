package signer

import (
	"context"
	"crypto/ecdsa"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"strings"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/bionicotaku/txmanager-service/internal/conf"
)

// RawKeySource signs with private keys held in plain memory: hex keys from the
// configuration and the embedded chain's development keys. Development only.
type RawKeySource struct {
	keys *localKeys
}

// NewRawKeySource builds a source from hex private keys (with or without 0x) and ready
// keys. It refuses any environment but development: raw keys in a config file or in
// process memory unencrypted are not acceptable for real funds.
func NewRawKeySource(environment string, hexKeys []string, keys []*ecdsa.PrivateKey) (*RawKeySource, error) {
	if environment != conf.EnvironmentDevelopment {
		return nil, fmt.Errorf("raw private keys are for development only (environment is %q); use signers.keystore or signers.external", environment)
	}
	all := make([]*ecdsa.PrivateKey, 0, len(hexKeys)+len(keys))
	for i, s := range hexKeys {
		key, err := parseHexKey(s)
		if err != nil {
			return nil, fmt.Errorf("signers.rawKeys[%d]: %w", i, err)
		}
		all = append(all, key)
	}
	all = append(all, keys...)
	lk, err := newLocalKeys(all)
	if err != nil {
		return nil, fmt.Errorf("raw keys: %w", err)
	}
	return &RawKeySource{keys: lk}, nil
}

// Addresses lists the source's signers, sorted.
func (s *RawKeySource) Addresses() []common.Address { return s.keys.Addresses() }

// SignTx signs tx with from's key for chainID.
func (s *RawKeySource) SignTx(ctx context.Context, from common.Address, tx *types.Transaction, chainID *big.Int) (*types.Transaction, error) {
	return s.keys.SignTx(ctx, from, tx, chainID)
}

// parseHexKey decodes a hex private key. Its errors are fixed texts: the decoders' own
// messages quote the offending character, which would leak part of the key.
func parseHexKey(s string) (*ecdsa.PrivateKey, error) {
	digits := strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
	if len(digits) != 64 {
		return nil, errors.New("not a private key: want 64 hex digits")
	}
	b, err := hex.DecodeString(digits)
	if err != nil {
		return nil, errors.New("not a private key: not hex")
	}
	key, err := crypto.ToECDSA(b)
	clear(b)
	if err != nil {
		return nil, errors.New("not a private key: out of range for secp256k1")
	}
	return key, nil
}
