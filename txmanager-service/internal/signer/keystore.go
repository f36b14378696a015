package signer

import (
	"context"
	"crypto/ecdsa"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"

	"github.com/ethereum/go-ethereum/accounts/keystore"
	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"

	"github.com/bionicotaku/txmanager-service/internal/conf"
)

// KeystoreSource signs with keys decrypted once, at construction, from a go-ethereum
// keystore directory (the files geth, clef and `geth account new` write).
//
// It reads the directory itself and decrypts with keystore.DecryptKey instead of opening
// a keystore.KeyStore: in go-ethereum v1.17.8 a KeyStore starts a filesystem watcher
// goroutine that has no Close method and stops only when the garbage collector finalises
// the KeyStore. The service unlocks its signers once at startup and never needs hot
// reload, so not starting the watcher is the only way to own every goroutine we start.
type KeystoreSource struct {
	keys *localKeys
}

// openKeystoreDir reads what every use of a keystore directory needs before decrypting
// anything: its passphrase and its key files. A directory kept for roster signers is
// checked with it at start; each signer's file is decrypted when the roster adds it.
func openKeystoreDir(cfg conf.KeystoreSource) (passphrase string, files map[common.Address][]string, err error) {
	if cfg.Dir == "" {
		return "", nil, errors.New("keystore: dir is empty")
	}
	if passphrase, err = readPassphrase(cfg.PassphraseFile, cfg.PassphraseEnv); err != nil {
		return "", nil, fmt.Errorf("keystore: %w", err)
	}
	if files, err = scanKeyFiles(cfg.Dir); err != nil {
		return "", nil, fmt.Errorf("keystore: %w", err)
	}
	return passphrase, files, nil
}

// NewKeystoreSource decrypts cfg.Addresses (every account in cfg.Dir when empty) with the
// passphrase from cfg.PassphraseFile or cfg.PassphraseEnv. Each key file's own scrypt
// parameters are used, whatever they are. The cleanup wipes the decrypted keys.
func NewKeystoreSource(cfg conf.KeystoreSource) (*KeystoreSource, func(), error) {
	passphrase, files, err := openKeystoreDir(cfg)
	if err != nil {
		return nil, nil, err
	}
	want, err := parseAddresses("addresses", cfg.Addresses)
	if err != nil {
		return nil, nil, fmt.Errorf("keystore: %w", err)
	}
	if len(want) == 0 {
		for addr := range files {
			want = append(want, addr)
		}
		if len(want) == 0 {
			return nil, nil, fmt.Errorf("keystore: no key files in %s", cfg.Dir)
		}
	}
	// Find every file before decrypting any: scrypt is slow by design, and a missing
	// account should not cost a decryption per account before it.
	for _, addr := range want {
		if err := checkOneKeyFile(addr, files[addr]); err != nil {
			return nil, nil, fmt.Errorf("keystore %s: %w", cfg.Dir, err)
		}
	}
	keys := make([]*ecdsa.PrivateKey, 0, len(want))
	wipeDecrypted := func() {
		for _, k := range keys {
			wipeKey(k)
		}
	}
	for _, addr := range want {
		key, err := decryptKeyFile(addr, files[addr][0], passphrase)
		if err != nil {
			wipeDecrypted()
			return nil, nil, fmt.Errorf("keystore %s: %w", cfg.Dir, err)
		}
		keys = append(keys, key)
	}
	lk, err := newLocalKeys(keys)
	if err != nil {
		wipeDecrypted()
		return nil, nil, fmt.Errorf("keystore: %w", err)
	}
	return &KeystoreSource{keys: lk}, lk.wipe, nil
}

// Addresses lists the unlocked signers, sorted.
func (s *KeystoreSource) Addresses() []common.Address { return s.keys.Addresses() }

// SignTx signs tx with from's key for chainID.
func (s *KeystoreSource) SignTx(ctx context.Context, from common.Address, tx *types.Transaction, chainID *big.Int) (*types.Transaction, error) {
	return s.keys.SignTx(ctx, from, tx, chainID)
}

// checkOneKeyFile requires exactly one key file for addr, as go-ethereum's keystore does:
// with two, which key signs would depend on directory order.
func checkOneKeyFile(addr common.Address, paths []string) error {
	switch len(paths) {
	case 0:
		return fmt.Errorf("no key file for %s", addr.Hex())
	case 1:
		return nil
	default:
		return fmt.Errorf("%s has %d key files; keep one", addr.Hex(), len(paths))
	}
}

// decryptKeyFile decrypts path and checks it holds addr's key. Errors name the account,
// never the passphrase.
func decryptKeyFile(addr common.Address, path, passphrase string) (*ecdsa.PrivateKey, error) {
	content, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("account %s: %w", addr.Hex(), err)
	}
	key, err := keystore.DecryptKey(content, passphrase)
	if err != nil {
		return nil, fmt.Errorf("unlock account %s: %w", addr.Hex(), err)
	}
	// The address in a key file is plain metadata; only the decrypted key is authoritative.
	if key.Address != addr {
		wipeKey(key.PrivateKey)
		return nil, fmt.Errorf("key file %s claims %s but holds another key", filepath.Base(path), addr.Hex())
	}
	return key.PrivateKey, nil
}

// scanKeyFiles maps each address to its key files, skipping what go-ethereum's keystore
// skips: hidden files, editor backups, directories, and files without an address. Unlike
// go-ethereum it follows a symlink to a regular file: a Kubernetes Secret volume presents
// every key as one (key -> ..data/key), and ..data itself is hidden, so nothing is read twice.
func scanKeyFiles(dir string) (map[common.Address][]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	files := make(map[common.Address][]string, len(entries))
	for _, entry := range entries {
		name := entry.Name()
		if strings.HasPrefix(name, ".") || strings.HasSuffix(name, "~") {
			continue
		}
		path := filepath.Join(dir, name)
		if !isRegularFile(entry, path) {
			continue
		}
		addr, ok := keyFileAddress(path)
		if !ok {
			continue
		}
		files[addr] = append(files[addr], path)
	}
	return files, nil
}

// isRegularFile reports whether entry is a regular file or a symlink that resolves to one.
func isRegularFile(entry os.DirEntry, path string) bool {
	if entry.Type().IsRegular() {
		return true
	}
	if entry.Type()&os.ModeSymlink == 0 {
		return false
	}
	target, err := os.Stat(path)
	return err == nil && target.Mode().IsRegular()
}

// keyFileAddress reads the address a key file declares, as go-ethereum's account cache does.
func keyFileAddress(path string) (common.Address, bool) {
	content, err := os.ReadFile(path)
	if err != nil {
		return common.Address{}, false
	}
	var header struct {
		Address string `json:"address"`
	}
	if json.Unmarshal(content, &header) != nil || !common.IsHexAddress(header.Address) {
		return common.Address{}, false
	}
	addr := common.HexToAddress(header.Address)
	return addr, addr != common.Address{}
}
