package chain

import (
	"crypto/ecdsa"
	"fmt"
	"strconv"

	"github.com/ethereum/go-ethereum/crypto"
)

// devKeySeedPrefix makes development keys reproducible across runs and machines, so
// configs and docs can name the same funded addresses. These keys are public knowledge:
// never fund them on a real network.
const devKeySeedPrefix = "txmanager dev account "

// DevKey returns development account number index: the private key is
// keccak256("txmanager dev account " + index).
func DevKey(index int) (*ecdsa.PrivateKey, error) {
	seed := crypto.Keccak256([]byte(devKeySeedPrefix + strconv.Itoa(index)))
	key, err := crypto.ToECDSA(seed)
	if err != nil {
		return nil, fmt.Errorf("dev key %d: %w", index, err)
	}
	return key, nil
}

// DevKeys are the first count development keys, DevKey(0) to DevKey(count-1).
func DevKeys(count int) ([]*ecdsa.PrivateKey, error) {
	keys := make([]*ecdsa.PrivateKey, count)
	for i := range keys {
		key, err := DevKey(i)
		if err != nil {
			return nil, err
		}
		keys[i] = key
	}
	return keys, nil
}
