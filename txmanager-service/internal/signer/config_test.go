package signer_test

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/signer"
	"github.com/bionicotaku/txmanager-service/test/gcpkms"
)

func TestNewFromConfigBuildsEverySource(t *testing.T) {
	t.Parallel()
	rawKey, devKey, externalKey := newKey(t), newKey(t), newKey(t)
	url := serveRPC(t, fakeClefLister{&fakeClef{key: externalKey, chainID: testChainID}, []common.Address{addressOf(externalKey)}})
	keystoreCfg := conf.KeystoreSource{Dir: fixture.dir, Addresses: hexes(fixture.accounts[0]), PassphraseFile: fixture.passphraseFile}
	rosterKeystore := conf.KeystoreSource{Dir: fixture.dir, PassphraseFile: fixture.passphraseFile, RosterOnly: true}
	externalCfg := conf.ExternalSource{URL: url, Addresses: hexes(addressOf(externalKey))}
	kms := startGCPKMS(t)
	kmsAddr := kms.AddKey(gcpkms.KeyName("hot"), newKey(t))
	gcpCfg := conf.GCPKMSSource{Endpoint: kms.Addr(), Plaintext: true, Keys: []conf.KMSKey{{ID: gcpkms.KeyName("hot")}}}
	tests := []struct {
		name        string
		cfg         conf.Signers
		environment string
		devKeys     []*ecdsa.PrivateKey
		want        []common.Address
	}{
		{
			name:        "development: raw, dev, keystore, external and Cloud KMS",
			cfg:         conf.Signers{RawKeys: []string{"0x" + keyHex(rawKey)}, Keystore: keystoreCfg, External: externalCfg, GCPKMS: gcpCfg},
			environment: conf.EnvironmentDevelopment,
			devKeys:     []*ecdsa.PrivateKey{devKey},
			want:        []common.Address{addressOf(rawKey), addressOf(devKey), fixture.accounts[0], addressOf(externalKey), kmsAddr},
		},
		{
			name:        "development: dev keys alone",
			environment: conf.EnvironmentDevelopment,
			devKeys:     []*ecdsa.PrivateKey{devKey},
			want:        []common.Address{addressOf(devKey)},
		},
		{
			name:        "production: a keystore kept for the roster unlocks none of its accounts",
			cfg:         conf.Signers{Keystore: rosterKeystore, External: externalCfg},
			environment: conf.EnvironmentProduction,
			want:        []common.Address{addressOf(externalKey)},
		},
		{
			name:        "production: a keystore kept for the roster alone starts with no signer",
			cfg:         conf.Signers{Keystore: rosterKeystore},
			environment: conf.EnvironmentProduction,
		},
		{
			name:        "production: keystore and external",
			cfg:         conf.Signers{Keystore: keystoreCfg, External: externalCfg},
			environment: conf.EnvironmentProduction,
			want:        []common.Address{fixture.accounts[0], addressOf(externalKey)},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			registry, cleanup, err := signer.NewFromConfig(tt.cfg, tt.environment, tt.devKeys)
			if err != nil {
				t.Fatal(err)
			}
			defer cleanup()
			if got := registry.Addresses(); !sameAddresses(got, tt.want) {
				t.Fatalf("addresses %v, want %v", got, tt.want)
			}
			for _, addr := range tt.want {
				tx := dynamicFeeTx(1)
				signed, err := registry.SignTx(context.Background(), addr, tx, testChainID)
				if err != nil {
					t.Fatalf("sign for %s: %v", addr.Hex(), err)
				}
				requireSignedBy(t, signed, tx, addr)
			}
		})
	}
}

func TestNewFromConfigRefusesDevelopmentKeysInProduction(t *testing.T) {
	t.Parallel()
	key := newKey(t)
	tests := []struct {
		name    string
		cfg     conf.Signers
		devKeys []*ecdsa.PrivateKey
	}{
		{"dev keys", conf.Signers{}, []*ecdsa.PrivateKey{key}},
		{"raw keys", conf.Signers{RawKeys: []string{keyHex(key)}}, nil},
		{"raw keys beside a keystore", conf.Signers{
			RawKeys:  []string{keyHex(key)},
			Keystore: conf.KeystoreSource{Dir: fixture.dir, PassphraseFile: fixture.passphraseFile},
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, _, err := signer.NewFromConfig(tt.cfg, conf.EnvironmentProduction, tt.devKeys)
			if err == nil || !strings.Contains(err.Error(), "development only") {
				t.Fatalf("got %v, want a development-only error", err)
			}
			requireNoSecret(t, err, keyHex(key))
		})
	}
}

func TestNewFromConfigRejectsBadConfig(t *testing.T) {
	t.Parallel()
	key := newKey(t)
	url := serveRPC(t, &fakeClef{key: key, chainID: testChainID})
	checksummed := addressOf(key).Hex()
	tests := []struct {
		name        string
		cfg         conf.Signers
		devKeys     []*ecdsa.PrivateKey
		wantInError string
	}{
		{"nothing configured", conf.Signers{}, nil, "no key source configured"},
		{"raw key equal to a dev key", conf.Signers{RawKeys: []string{keyHex(key)}}, []*ecdsa.PrivateKey{key}, "given twice"},
		{"external address with a bad checksum", conf.Signers{External: conf.ExternalSource{URL: url, Addresses: []string{flipCase(checksummed)}}}, nil, "EIP-55"},
		{"external address without 0x", conf.Signers{External: conf.ExternalSource{URL: url, Addresses: []string{checksummed[2:]}}}, nil, "0x followed by 40 hex digits"},
		{"external address too short", conf.Signers{External: conf.ExternalSource{URL: url, Addresses: []string{checksummed[:41]}}}, nil, "0x followed by 40 hex digits"},
		{"external addresses without url", conf.Signers{External: conf.ExternalSource{Addresses: []string{checksummed}}}, nil, "url is empty"},
		{"keystore without dir", conf.Signers{Keystore: conf.KeystoreSource{PassphraseFile: fixture.passphraseFile}}, nil, "dir is empty"},
		{"keystore kept for the roster without its passphrase", conf.Signers{Keystore: conf.KeystoreSource{Dir: fixture.dir, RosterOnly: true}}, nil, "set passphraseFile or passphraseEnv"},
		{"keystore kept for the roster in a missing directory", conf.Signers{Keystore: conf.KeystoreSource{Dir: fixture.dir + "-missing", PassphraseFile: fixture.passphraseFile, RosterOnly: true}},
			nil, "no such file or directory"},
		{"Cloud KMS unreachable", conf.Signers{GCPKMS: conf.GCPKMSSource{Endpoint: strings.TrimPrefix(unreachableURL(t), "http://"), Plaintext: true,
			Timeout: conf.Duration(300 * time.Millisecond), MaxAttempts: 2, Keys: []conf.KMSKey{{ID: gcpkms.KeyName("hot")}}}}, nil,
			"gcp kms: key " + gcpkms.KeyName("hot") + " (signers.gcpKms.keys[0]): get public key"},
		{"same address in keystore and external", conf.Signers{
			Keystore: conf.KeystoreSource{Dir: fixture.dir, Addresses: hexes(fixture.accounts[0]), PassphraseFile: fixture.passphraseFile},
			External: conf.ExternalSource{URL: url, Addresses: hexes(fixture.accounts[0])},
		}, nil, "more than one key source"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			registry, cleanup, err := signer.NewFromConfig(tt.cfg, conf.EnvironmentDevelopment, tt.devKeys)
			if err == nil {
				cleanup()
				t.Fatalf("built a registry of %v", registry.Addresses())
			}
			if !strings.Contains(err.Error(), tt.wantInError) {
				t.Fatalf("error %q does not contain %q", err, tt.wantInError)
			}
			requireNoSecret(t, err, keyHex(key))
		})
	}
}

func TestNewFromConfigCleanupClosesSources(t *testing.T) {
	t.Parallel()
	key := newKey(t)
	url := serveRPC(t, &fakeClef{key: key, chainID: testChainID})
	kms := startGCPKMS(t)
	kmsAddr := kms.AddKey(gcpkms.KeyName("hot"), newKey(t))
	registry, cleanup, err := signer.NewFromConfig(conf.Signers{
		Keystore: conf.KeystoreSource{Dir: fixture.dir, Addresses: hexes(fixture.accounts[1]), PassphraseFile: fixture.passphraseFile},
		External: conf.ExternalSource{URL: url, Addresses: hexes(addressOf(key))},
		GCPKMS:   conf.GCPKMSSource{Endpoint: kms.Addr(), Plaintext: true, Keys: []conf.KMSKey{{ID: gcpkms.KeyName("hot")}}},
	}, conf.EnvironmentDevelopment, nil)
	if err != nil {
		t.Fatal(err)
	}
	cleanup()
	cleanup() // a second call must be harmless
	for _, addr := range []common.Address{fixture.accounts[1], addressOf(key), kmsAddr} {
		if _, err := registry.SignTx(context.Background(), addr, dynamicFeeTx(0), testChainID); err == nil {
			t.Fatalf("signed for %s after cleanup", addr.Hex())
		} else if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("sign for %s after cleanup timed out instead of failing: %v", addr.Hex(), err)
		}
	}
}
