package chain

import (
	"crypto/ecdsa"
	"fmt"
	"strconv"

	"github.com/ethereum/go-ethereum/common"
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

// publicDevAccountsChecked is how many of our own development accounts production refuses;
// the embedded chain funds the first few (chain.embedded.devAccounts, 10 by default).
const publicDevAccountsChecked = 100

// hardhatAccounts are the first accounts of the mnemonic Hardhat and Anvil fund by default
// ("test test ... junk"): their keys are printed by every local node start.
var hardhatAccounts = [...]string{
	"0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266", "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
	"0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC", "0x90F79bf6EB2c4f870365E785982E1f101E93b906",
	"0x15d34AAf54267DB7D7c367839AAf71A00a2C6A65", "0x9965507D1a55bcC2695C58ba16FB37d819B0A4dc",
	"0x976EA74026E726554dB657fA54763abd0C3a0aa9", "0x14dC79964da2C08b23698B3D3cc7Ca32193d9955",
	"0x23618e81E3f5cdF7f54C3d65f7FBc0aBf5B21E8f", "0xa0Ee7A142d267C1f36714E4a8F75612F20a79720",
}

// PublicDevelopmentAddresses maps addresses whose private keys are public knowledge (ours
// and Hardhat's/Anvil's) to a name saying where the key comes from. Production refuses to
// sign for any of them.
func PublicDevelopmentAddresses() (map[common.Address]string, error) {
	known := make(map[common.Address]string, publicDevAccountsChecked+len(hardhatAccounts))
	for i := range publicDevAccountsChecked {
		key, err := DevKey(i)
		if err != nil {
			return nil, err
		}
		known[crypto.PubkeyToAddress(key.PublicKey)] = fmt.Sprintf("txmanager development account %d", i)
	}
	for i, hex := range hardhatAccounts {
		known[common.HexToAddress(hex)] = fmt.Sprintf("Hardhat/Anvil default account %d", i)
	}
	return known, nil
}
