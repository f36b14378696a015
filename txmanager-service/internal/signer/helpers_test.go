package signer_test

import (
	"crypto/ecdsa"
	"encoding/hex"
	"math/big"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
)

var testChainID = big.NewInt(1337)

// dynamicFeeTx is the kind of transaction the service signs: EIP-1559, chain id left for
// the signer to fill in.
func dynamicFeeTx(nonce uint64) *types.Transaction {
	to := common.HexToAddress("0x00000000000000000000000000000000000000aa")
	return types.NewTx(&types.DynamicFeeTx{
		Nonce:     nonce,
		To:        &to,
		Value:     big.NewInt(1_000),
		Gas:       50_000,
		GasTipCap: big.NewInt(2_000_000_000),
		GasFeeCap: big.NewInt(30_000_000_000),
		Data:      []byte{0xca, 0xfe},
	})
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	key, err := crypto.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func addressOf(key *ecdsa.PrivateKey) common.Address { return crypto.PubkeyToAddress(key.PublicKey) }

func keyHex(key *ecdsa.PrivateKey) string { return hex.EncodeToString(crypto.FromECDSA(key)) }

// requireSignedBy checks that signed recovers to want under the test chain's signer and
// is still the transaction that was asked for.
func requireSignedBy(t *testing.T, signed, asked *types.Transaction, want common.Address) {
	t.Helper()
	signer := types.LatestSignerForChainID(testChainID)
	got, err := types.Sender(signer, signed)
	if err != nil {
		t.Fatalf("recover sender: %v", err)
	}
	if got != want {
		t.Fatalf("signed by %s, want %s", got.Hex(), want.Hex())
	}
	if signer.Hash(signed) != signer.Hash(asked) {
		t.Fatal("signed transaction differs from the one asked for")
	}
	if signed.ChainId().Cmp(testChainID) != 0 {
		t.Fatalf("chain id %s, want %s", signed.ChainId(), testChainID)
	}
}

// requireNoSecret fails if err's text contains any secret or the first 8 characters of
// one (with and without a 0x prefix).
func requireNoSecret(t *testing.T, err error, secrets ...string) {
	t.Helper()
	if err == nil {
		t.Fatal("expected an error")
	}
	msg := strings.ToLower(err.Error())
	for _, secret := range secrets {
		bare := strings.ToLower(strings.TrimPrefix(secret, "0x"))
		for _, leak := range []string{bare, bare[:min(8, len(bare))]} {
			if leak != "" && strings.Contains(msg, leak) {
				t.Fatalf("error %q leaks secret material %q", err, leak)
			}
		}
	}
}
