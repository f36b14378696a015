package signer

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/conf"
)

// externalConnectTimeout bounds the external signer's startup check (account_list).
const externalConnectTimeout = 10 * time.Second

// kmsStartupTimeout bounds reading a KMS source's public keys at startup; each look-up
// also has the source's own per-call timeout.
const kmsStartupTimeout = 30 * time.Second

// NewFromConfig builds every configured key source and joins them in a Registry.
// Raw keys and devKeys (the embedded chain's funded development keys) are accepted only
// in development; devKeys in any other environment is an error, so a production process
// can never sign with publicly known keys. The cleanup wipes decrypted keystore keys and
// closes the external signer's and Cloud KMS's connections; calls after the first do nothing.
func NewFromConfig(cfg conf.Signers, environment string, devKeys []*ecdsa.PrivateKey) (*Registry, func(), error) {
	var (
		sources  []Source
		cleanups []func()
	)
	cleanup := sync.OnceFunc(func() {
		for _, release := range slices.Backward(cleanups) {
			release()
		}
	})
	fail := func(err error) (*Registry, func(), error) {
		cleanup()
		return nil, nil, err
	}

	if len(cfg.RawKeys) > 0 || len(devKeys) > 0 {
		raw, err := NewRawKeySource(environment, cfg.RawKeys, devKeys)
		if err != nil {
			return fail(fmt.Errorf("signers: %w", err))
		}
		sources = append(sources, raw)
	}

	rosterKeystore := cfg.Keystore.RosterOnly
	if rosterKeystore {
		if _, _, err := openKeystoreDir(cfg.Keystore); err != nil {
			return fail(fmt.Errorf("signers: %w", err))
		}
	} else if ks := cfg.Keystore; ks.Dir != "" || len(ks.Addresses) > 0 || ks.PassphraseFile != "" || ks.PassphraseEnv != "" {
		src, release, err := NewKeystoreSource(ks)
		if err != nil {
			return fail(fmt.Errorf("signers: %w", err))
		}
		sources = append(sources, src)
		cleanups = append(cleanups, release)
	}

	if ext := cfg.External; ext.URL != "" || len(ext.Addresses) > 0 {
		addrs, err := parseAddresses("signers.external.addresses", ext.Addresses)
		if err != nil {
			return fail(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), externalConnectTimeout)
		src, release, err := NewExternalSource(ctx, ext.URL, addrs, ext.Timeout.Std())
		cancel()
		if err != nil {
			return fail(fmt.Errorf("signers: %w", err))
		}
		sources = append(sources, src)
		cleanups = append(cleanups, release)
	}

	if cfg.AWSKMS.Configured() {
		ctx, cancel := context.WithTimeout(context.Background(), kmsStartupTimeout)
		src, err := NewAWSKMSSource(ctx, cfg.AWSKMS)
		cancel()
		if err != nil {
			return fail(fmt.Errorf("signers: %w", err))
		}
		sources = append(sources, src)
	}

	if cfg.GCPKMS.Configured() {
		ctx, cancel := context.WithTimeout(context.Background(), kmsStartupTimeout)
		src, release, err := NewGCPKMSSource(ctx, cfg.GCPKMS)
		cancel()
		if err != nil {
			return fail(fmt.Errorf("signers: %w", err))
		}
		sources = append(sources, src)
		cleanups = append(cleanups, release)
	}

	// A node whose signers all come from a keystore kept for the roster starts with none.
	if len(sources) == 0 && !rosterKeystore {
		return fail(errors.New("signers: no key source configured (signers.keystore, signers.external, signers.awsKms, signers.gcpKms, or in development signers.rawKeys)"))
	}
	registry, err := NewRegistryFromSources(sources...)
	if err != nil {
		return fail(fmt.Errorf("signers: %w", err))
	}
	return registry, cleanup, nil
}
