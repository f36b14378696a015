package signer_test

import (
	"context"
	"crypto/ecdsa"
	"encoding/hex"
	"math/big"
	"strings"
	"sync"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"

	"github.com/bionicotaku/txmanager-service/internal/signer"
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

// requireSignsConcurrently has src sign n transactions, for the addresses in turn, from n
// goroutines at once, and checks every one: a source may be called concurrently.
func requireSignsConcurrently(t *testing.T, src signer.Source, from []common.Address, n int) {
	t.Helper()
	signed := make([]*types.Transaction, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			signed[i], errs[i] = src.SignTx(context.Background(), from[i%len(from)], dynamicFeeTx(uint64(i)), testChainID)
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("signature %d, for %s: %v", i, from[i%len(from)].Hex(), errs[i])
		}
		requireSignedBy(t, signed[i], dynamicFeeTx(uint64(i)), from[i%len(from)])
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
