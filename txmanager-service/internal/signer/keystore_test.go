package signer_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/accounts/keystore"
	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/signer"
)

func TestKeystoreSourceUnlocksAndSigns(t *testing.T) {
	ks := fixture
	t.Setenv(passphraseEnv, testPassphrase)
	tests := []struct {
		name string
		cfg  conf.KeystoreSource
		want []common.Address
	}{
		{
			name: "every account, passphrase from file",
			cfg:  conf.KeystoreSource{Dir: ks.dir, PassphraseFile: ks.passphraseFile},
			want: ks.accounts,
		},
		{
			name: "one lower-case address, passphrase from env",
			cfg:  conf.KeystoreSource{Dir: ks.dir, Addresses: []string{strings.ToLower(ks.accounts[1].Hex())}, PassphraseEnv: passphraseEnv},
			want: ks.accounts[1:],
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src, cleanup, err := signer.NewKeystoreSource(tt.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer cleanup()
			if got := src.Addresses(); !sameAddresses(got, tt.want) {
				t.Fatalf("addresses %v, want %v", got, tt.want)
			}
			for _, addr := range tt.want {
				tx := dynamicFeeTx(3)
				signed, err := src.SignTx(context.Background(), addr, tx, testChainID)
				if err != nil {
					t.Fatalf("sign for %s: %v", addr.Hex(), err)
				}
				requireSignedBy(t, signed, tx, addr)
			}
		})
	}
}

// TestKeystoreSourceReadsASecretVolume: Kubernetes mounts a Secret as symlinks into a
// hidden, atomically swapped ..data folder; every key must load exactly once from it.
func TestKeystoreSourceReadsASecretVolume(t *testing.T) {
	ks := fixture
	dir := t.TempDir()
	data := filepath.Join(dir, "..2026_11_24_10_00_00.123456789")
	if err := os.Mkdir(data, 0o700); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(ks.dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, entry := range entries {
		content, err := os.ReadFile(filepath.Join(ks.dir, entry.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(data, entry.Name()), content, 0o400); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Base(data), filepath.Join(dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for _, entry := range entries {
		if err := os.Symlink(filepath.Join("..data", entry.Name()), filepath.Join(dir, entry.Name())); err != nil {
			t.Fatal(err)
		}
	}
	// A dangling link (a key removed from the Secret mid-swap) is skipped, not fatal.
	if err := os.Symlink(filepath.Join("..data", "gone.json"), filepath.Join(dir, "gone.json")); err != nil {
		t.Fatal(err)
	}

	src, cleanup, err := signer.NewKeystoreSource(conf.KeystoreSource{Dir: dir, PassphraseFile: ks.passphraseFile})
	if err != nil {
		t.Fatalf("keystore from a Secret-volume layout: %v", err)
	}
	defer cleanup()
	if got := src.Addresses(); !sameAddresses(got, ks.accounts) {
		t.Fatalf("addresses %v, want %v", got, ks.accounts)
	}
	tx := dynamicFeeTx(1)
	signed, err := src.SignTx(context.Background(), ks.accounts[0], tx, testChainID)
	if err != nil {
		t.Fatal(err)
	}
	requireSignedBy(t, signed, tx, ks.accounts[0])
}

func TestKeystoreSourceConstructionErrors(t *testing.T) {
	ks := fixture
	wrongFile := filepath.Join(t.TempDir(), "wrong")
	writeFile(t, wrongFile, wrongPassphrase+"\n")
	missing := common.HexToAddress("0x2222222222222222222222222222222222222222")
	twoFilesDir := t.TempDir()
	copyKeyFiles(t, ks.dir, twoFilesDir, 2)
	tests := []struct {
		name        string
		cfg         conf.KeystoreSource
		env         string // value of passphraseEnv; "" leaves it unset
		wantInError string
		wantIs      error
	}{
		{
			name:        "wrong passphrase from file",
			cfg:         conf.KeystoreSource{Dir: ks.dir, PassphraseFile: wrongFile},
			wantInError: "unlock account 0x",
			wantIs:      keystore.ErrDecrypt,
		},
		{
			name:        "wrong passphrase from env names the account",
			cfg:         conf.KeystoreSource{Dir: ks.dir, Addresses: hexes(ks.accounts[1]), PassphraseEnv: passphraseEnv},
			env:         wrongPassphrase,
			wantInError: "unlock account " + ks.accounts[1].Hex(),
			wantIs:      keystore.ErrDecrypt,
		},
		{
			name:        "configured address not in the keystore",
			cfg:         conf.KeystoreSource{Dir: ks.dir, Addresses: hexes(ks.accounts[0], missing), PassphraseFile: ks.passphraseFile},
			wantInError: "no key file for " + missing.Hex(),
		},
		{
			name:        "two key files for one account",
			cfg:         conf.KeystoreSource{Dir: twoFilesDir, PassphraseFile: ks.passphraseFile},
			wantInError: "2 key files",
		},
		{
			name:        "both passphrase sources",
			cfg:         conf.KeystoreSource{Dir: ks.dir, PassphraseFile: ks.passphraseFile, PassphraseEnv: passphraseEnv},
			env:         testPassphrase,
			wantInError: "not both",
		},
		{
			name:        "no passphrase source",
			cfg:         conf.KeystoreSource{Dir: ks.dir},
			wantInError: "set passphraseFile or passphraseEnv",
		},
		{
			name:        "passphrase env unset",
			cfg:         conf.KeystoreSource{Dir: ks.dir, PassphraseEnv: passphraseEnv},
			wantInError: passphraseEnv + " is not set",
		},
		{
			name:        "passphrase file missing",
			cfg:         conf.KeystoreSource{Dir: ks.dir, PassphraseFile: filepath.Join(ks.dir, "nope")},
			wantInError: "passphrase file",
			wantIs:      os.ErrNotExist,
		},
		{
			name:   "directory missing",
			cfg:    conf.KeystoreSource{Dir: filepath.Join(ks.dir, "nope"), PassphraseFile: ks.passphraseFile},
			wantIs: os.ErrNotExist,
		},
		{
			name:        "directory without keys",
			cfg:         conf.KeystoreSource{Dir: t.TempDir(), PassphraseFile: ks.passphraseFile},
			wantInError: "no key files",
		},
		{
			name:        "no directory",
			cfg:         conf.KeystoreSource{PassphraseFile: ks.passphraseFile},
			wantInError: "dir is empty",
		},
		{
			name:        "bad checksum",
			cfg:         conf.KeystoreSource{Dir: ks.dir, Addresses: []string{flipCase(ks.accounts[0].Hex())}, PassphraseFile: ks.passphraseFile},
			wantInError: "EIP-55",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env != "" {
				t.Setenv(passphraseEnv, tt.env)
			} else {
				unsetEnv(t, passphraseEnv)
			}
			src, cleanup, err := signer.NewKeystoreSource(tt.cfg)
			if err == nil {
				cleanup()
				t.Fatalf("constructed a source holding %v", src.Addresses())
			}
			requireNoSecret(t, err, testPassphrase, wrongPassphrase)
			if !strings.Contains(err.Error(), tt.wantInError) {
				t.Fatalf("error %q does not contain %q", err, tt.wantInError)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Fatalf("error %q does not match %v", err, tt.wantIs)
			}
		})
	}
}

// The source must leave no goroutine behind (go-ethereum's KeyStore would start a
// filesystem watcher that only the garbage collector stops), and its cleanup must make
// the keys unusable.
func TestKeystoreSourceStartsNoWatcherAndCleansUp(t *testing.T) {
	t.Parallel()
	ks := fixture
	src, cleanup, err := signer.NewKeystoreSource(conf.KeystoreSource{
		Dir: ks.dir, Addresses: hexes(ks.accounts[0]), PassphraseFile: ks.passphraseFile,
	})
	if err != nil {
		t.Fatal(err)
	}
	stacks := make([]byte, 1<<20)
	stacks = stacks[:runtime.Stack(stacks, true)]
	for _, watcher := range []string{"accounts/keystore.(*watcher)", "fsnotify"} {
		if strings.Contains(string(stacks), watcher) {
			t.Fatalf("a keystore watcher goroutine is running:\n%s", stacks)
		}
	}

	cleanup()
	_, err = src.SignTx(context.Background(), ks.accounts[0], dynamicFeeTx(0), testChainID)
	if err == nil || errors.Is(err, domain.ErrUnknownSigner) {
		t.Fatalf("signing after cleanup: got %v, want a closed-source error", err)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// copyKeyFiles writes copies copies of the first key file in from into to.
func copyKeyFiles(t *testing.T, from, to string, copies int) {
	t.Helper()
	matches, err := filepath.Glob(filepath.Join(from, "UTC--*"))
	if err != nil || len(matches) == 0 {
		t.Fatalf("no key files in %s: %v", from, err)
	}
	content, err := os.ReadFile(matches[0])
	if err != nil {
		t.Fatal(err)
	}
	for i := range copies {
		writeFile(t, filepath.Join(to, "key-copy-"+string(rune('a'+i))), string(content))
	}
}

func hexes(addrs ...common.Address) []string {
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = a.Hex()
	}
	return out
}

func sameAddresses(got, want []common.Address) bool {
	if len(got) != len(want) {
		return false
	}
	for _, w := range want {
		found := false
		for _, g := range got {
			found = found || g == w
		}
		if !found {
			return false
		}
	}
	return true
}

// flipCase swaps the case of a letter of a checksummed address, breaking EIP-55.
func flipCase(addr string) string {
	// One letter flipped, where the result still mixes cases: an address in one case only
	// carries no checksum and is accepted (0x1D06...: flipping its only capital made it so).
	for i := 2; i < len(addr); i++ {
		b := []byte(addr)
		switch c := b[i]; {
		case 'a' <= c && c <= 'f':
			b[i] = c - 'a' + 'A'
		case 'A' <= c && c <= 'F':
			b[i] = c - 'A' + 'a'
		default:
			continue
		}
		if hex := string(b[2:]); hex != strings.ToLower(hex) && hex != strings.ToUpper(hex) {
			return string(b)
		}
	}
	panic("no letter to flip that leaves a checksum: " + addr)
}

// unsetEnv removes name for the rest of the test; t.Setenv first records the value to
// restore.
func unsetEnv(t *testing.T, name string) {
	t.Helper()
	t.Setenv(name, "")
	if err := os.Unsetenv(name); err != nil {
		t.Fatal(err)
	}
}

// The helper itself: an address whose only capital is its first letter (seen in CI) still
// comes out with a broken checksum, not in one case.
func TestFlipCaseLeavesABrokenChecksum(t *testing.T) {
	for _, addr := range []string{"0x1D064034463695a37ba720221c806231b7722111", "0x06497E1D26D6C5A126E29FFbb240F267C4851c42"} {
		flipped := flipCase(addr)
		hex := flipped[2:]
		if !strings.EqualFold(flipped, addr) || flipped == addr || hex == strings.ToLower(hex) || hex == strings.ToUpper(hex) {
			t.Errorf("flipCase(%s) = %s, want one letter's case changed and both cases left", addr, flipped)
		}
	}
}
