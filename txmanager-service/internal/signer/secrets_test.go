package signer_test

import (
	"context"
	"crypto/ecdsa"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/signer"
)

// Every way construction can fail must keep the raw key text and the passphrase out of
// the error: errors end up in logs and API responses.
func TestConstructorErrorsCarryNoSecrets(t *testing.T) {
	key := newKey(t)
	valid := keyHex(key)
	wrongFile := filepath.Join(t.TempDir(), "wrong")
	writeFile(t, wrongFile, wrongPassphrase+"\n")
	keystoreWith := func(file, env string, addrs ...string) conf.KeystoreSource {
		return conf.KeystoreSource{Dir: fixture.dir, Addresses: addrs, PassphraseFile: file, PassphraseEnv: env}
	}
	fromConfig := func(cfg conf.Signers, env string, devKeys ...*ecdsa.PrivateKey) func() error {
		return func() error {
			_, cleanup, err := signer.NewFromConfig(cfg, env, devKeys)
			if err == nil {
				cleanup()
			}
			return err
		}
	}
	badKeys := []string{
		"0x" + valid[:63] + "z", "zz" + valid[2:], valid[:40], valid + "ab", "0x" + valid + "ab",
		strings.Repeat("0", 64), strings.Repeat("F", 64), valid[:32] + " " + valid[33:],
		common.HexToAddress("0x1").Hex(), // an address where a key belongs
	}
	type errorPath struct {
		name    string
		env     string // value of passphraseEnv; "" leaves it unset
		build   func() error
		secrets []string
	}
	var paths []errorPath
	for i, bad := range badKeys {
		paths = append(paths,
			errorPath{name: "bad raw key " + string(rune('a'+i)), build: fromConfig(conf.Signers{RawKeys: []string{valid, bad}}, conf.EnvironmentDevelopment), secrets: []string{valid, bad}},
			errorPath{name: "bad key as address " + string(rune('a'+i)), build: fromConfig(conf.Signers{External: conf.ExternalSource{URL: "http://127.0.0.1:1", Addresses: []string{bad}}}, conf.EnvironmentDevelopment), secrets: []string{bad}},
		)
	}
	paths = append(paths,
		errorPath{name: "raw key in production", build: fromConfig(conf.Signers{RawKeys: []string{valid}}, conf.EnvironmentProduction), secrets: []string{valid}},
		errorPath{name: "dev key in production", build: fromConfig(conf.Signers{}, conf.EnvironmentProduction, key), secrets: []string{valid}},
		errorPath{name: "raw key given twice", build: fromConfig(conf.Signers{RawKeys: []string{valid, "0x" + valid}}, conf.EnvironmentDevelopment), secrets: []string{valid}},
		errorPath{name: "raw key equal to a dev key", build: fromConfig(conf.Signers{RawKeys: []string{valid}}, conf.EnvironmentDevelopment, key), secrets: []string{valid}},
		errorPath{name: "private key pasted as keystore address", build: fromConfig(conf.Signers{Keystore: keystoreWith(fixture.passphraseFile, "", "0x"+valid)}, conf.EnvironmentProduction), secrets: []string{valid, testPassphrase}},
		errorPath{name: "raw keys beside an unreachable external signer", build: fromConfig(conf.Signers{RawKeys: []string{valid}, External: conf.ExternalSource{URL: unreachableURL(t), Addresses: hexes(addressOf(key))}}, conf.EnvironmentDevelopment), secrets: []string{valid}},
		errorPath{name: "raw keys beside a keystore with the wrong passphrase", build: fromConfig(conf.Signers{RawKeys: []string{valid}, Keystore: keystoreWith(wrongFile, "")}, conf.EnvironmentDevelopment), secrets: []string{valid, wrongPassphrase, testPassphrase}},
		errorPath{name: "keystore wrong passphrase from env", env: wrongPassphrase, build: fromConfig(conf.Signers{Keystore: keystoreWith("", passphraseEnv, fixture.accounts[1].Hex())}, conf.EnvironmentProduction), secrets: []string{wrongPassphrase, testPassphrase}},
		errorPath{name: "keystore missing address", env: testPassphrase, build: fromConfig(conf.Signers{Keystore: keystoreWith("", passphraseEnv, fixture.accounts[0].Hex(), addressOf(key).Hex())}, conf.EnvironmentProduction), secrets: []string{testPassphrase}},
		errorPath{name: "keystore both passphrase sources", env: testPassphrase, build: fromConfig(conf.Signers{Keystore: keystoreWith(fixture.passphraseFile, passphraseEnv)}, conf.EnvironmentProduction), secrets: []string{testPassphrase}},
		errorPath{name: "keystore passphrase env unset", build: fromConfig(conf.Signers{Keystore: keystoreWith("", passphraseEnv)}, conf.EnvironmentProduction), secrets: []string{testPassphrase}},
		errorPath{name: "keystore dir missing", env: testPassphrase, build: fromConfig(conf.Signers{Keystore: conf.KeystoreSource{Dir: filepath.Join(fixture.dir, "nope"), PassphraseEnv: passphraseEnv}}, conf.EnvironmentProduction), secrets: []string{testPassphrase}},
		errorPath{name: "external unreachable", build: func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, _, err := signer.NewExternalSource(ctx, unreachableURL(t), []common.Address{addressOf(key)}, 0)
			return err
		}, secrets: []string{valid}},
	)
	for _, p := range paths {
		t.Run(p.name, func(t *testing.T) {
			if p.env != "" {
				t.Setenv(passphraseEnv, p.env)
			} else {
				unsetEnv(t, passphraseEnv)
			}
			requireNoSecret(t, p.build(), p.secrets...)
		})
	}
}
