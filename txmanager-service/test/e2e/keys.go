package e2e

import (
	"crypto/ecdsa"
	"strconv"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"
)

// Keys returns n signer keys, the same on every run, so that a failed run's addresses can
// be found again in logs and so that several processes of one suite agree on them without
// passing keys around. Key i is keccak256("txmanager e2e signer <i>").
func Keys(n int) []*ecdsa.PrivateKey {
	keys := make([]*ecdsa.PrivateKey, n)
	for i := range keys {
		keys[i] = keyFromSeed(crypto.Keccak256([]byte("txmanager e2e signer " + strconv.Itoa(i))))
	}
	return keys
}

// keyFromSeed turns 32 bytes into a key. A hash that is not a valid secp256k1 scalar (zero
// or at least the curve order, odds about 2^-128) is hashed again, which keeps Keys
// deterministic without an error path that can never be taken in practice.
func keyFromSeed(seed []byte) *ecdsa.PrivateKey {
	for {
		key, err := crypto.ToECDSA(seed)
		if err == nil {
			return key
		}
		seed = crypto.Keccak256(seed)
	}
}

// Address is the account a key signs for.
func Address(key *ecdsa.PrivateKey) common.Address {
	return crypto.PubkeyToAddress(key.PublicKey)
}

// Addresses are the accounts of keys, in order.
func Addresses(keys []*ecdsa.PrivateKey) []common.Address {
	addrs := make([]common.Address, len(keys))
	for i, key := range keys {
		addrs[i] = Address(key)
	}
	return addrs
}

// KeyHex is a key as the service's signers.rawKeys expect it: 0x-prefixed hex.
func KeyHex(key *ecdsa.PrivateKey) string {
	return hexutil.Encode(crypto.FromECDSA(key))
}

// Recipient is where e2e transfers go: an address nobody holds a key for, derived like the
// signer keys so it is the same on every run and never one of the signers.
func Recipient() common.Address {
	return common.BytesToAddress(crypto.Keccak256([]byte("txmanager e2e recipient")))
}
