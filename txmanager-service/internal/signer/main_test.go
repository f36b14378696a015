package signer_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ethereum/go-ethereum/accounts"
	"github.com/ethereum/go-ethereum/accounts/keystore"
	"github.com/ethereum/go-ethereum/common"
)

const (
	testPassphrase  = "correct horse battery staple 7f3a"
	wrongPassphrase = "wrong passphrase 91c2"
	passphraseEnv   = "TXM_SIGNER_TEST_PASSPHRASE"
)

// testKeystore is a keystore directory with two accounts encrypted under testPassphrase,
// and a file holding the passphrase. Tests only read it.
type testKeystore struct {
	dir            string
	accounts       []common.Address
	passphraseFile string
}

// fixture is built once by TestMain: scrypt, even with the light parameters, takes most of
// a second per key under the race detector.
var fixture testKeystore

func TestMain(m *testing.M) {
	root, err := os.MkdirTemp("", "signer-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fixture, err = newTestKeystore(root)
	code := 1
	if err != nil {
		fmt.Fprintln(os.Stderr, "keystore fixture:", err)
	} else {
		code = m.Run()
	}
	_ = os.RemoveAll(root)
	os.Exit(code)
}

func newTestKeystore(root string) (testKeystore, error) {
	ks := testKeystore{dir: filepath.Join(root, "keys"), passphraseFile: filepath.Join(root, "passphrase")}
	// Two scrypt runs in parallel: the fixture is most of the package's test time.
	created := make([]accounts.Account, 2)
	errs := make([]error, len(created))
	var wg sync.WaitGroup
	for i := range created {
		wg.Go(func() {
			created[i], errs[i] = keystore.StoreKey(ks.dir, testPassphrase, keystore.LightScryptN, keystore.LightScryptP)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return ks, err
	}
	for _, acc := range created {
		ks.accounts = append(ks.accounts, acc.Address)
	}
	files := map[string]string{
		// Files go-ethereum's keystore ignores must not trip us up either.
		filepath.Join(ks.dir, "README"):  "not a key",
		filepath.Join(ks.dir, ".hidden"): `{"address":"0x1111111111111111111111111111111111111111"}`,
		// Only the first line counts, and a Windows line ending is not part of it.
		ks.passphraseFile: testPassphrase + "\r\nsecond line is ignored\n",
	}
	for path, content := range files {
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return ks, err
		}
	}
	return ks, nil
}
