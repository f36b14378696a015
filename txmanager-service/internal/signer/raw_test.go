package signer_test

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"strings"
	"testing"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/signer"
)

func TestRawKeySourceSignsDynamicFeeTx(t *testing.T) {
	t.Parallel()
	hexKey, readyKey := newKey(t), newKey(t)
	tests := []struct {
		name    string
		hexKeys []string
		keys    []*ecdsa.PrivateKey
		from    *ecdsa.PrivateKey
	}{
		{"hex key without 0x", []string{keyHex(hexKey)}, nil, hexKey},
		{"hex key with 0x", []string{"0x" + keyHex(hexKey)}, nil, hexKey},
		{"ecdsa key", nil, []*ecdsa.PrivateKey{readyKey}, readyKey},
		{"both, signing with the ecdsa key", []string{keyHex(hexKey)}, []*ecdsa.PrivateKey{readyKey}, readyKey},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			src, err := signer.NewRawKeySource(conf.EnvironmentDevelopment, tt.hexKeys, tt.keys)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := len(src.Addresses()), len(tt.hexKeys)+len(tt.keys); got != want {
				t.Fatalf("%d addresses, want %d", got, want)
			}
			tx := dynamicFeeTx(7)
			signed, err := src.SignTx(context.Background(), addressOf(tt.from), tx, testChainID)
			if err != nil {
				t.Fatal(err)
			}
			requireSignedBy(t, signed, tx, addressOf(tt.from))
		})
	}
}

func TestRawKeySourceRefusesOutsideDevelopment(t *testing.T) {
	t.Parallel()
	key := newKey(t)
	for _, env := range []string{conf.EnvironmentProduction, "", "staging"} {
		_, err := signer.NewRawKeySource(env, []string{keyHex(key)}, nil)
		if err == nil || !strings.Contains(err.Error(), "development only") {
			t.Fatalf("environment %q: got %v, want a development-only error", env, err)
		}
		requireNoSecret(t, err, keyHex(key))
	}
}

func TestRawKeySourceRejectsBadKeysWithoutEchoingThem(t *testing.T) {
	t.Parallel()
	valid := keyHex(newKey(t))
	tests := []struct{ name, key string }{
		{"non-hex character", "zz" + valid[2:]},
		{"non-hex character at the end", valid[:63] + "g"},
		{"0x and non-hex", "0x" + valid[:62] + "xy"},
		{"too short", valid[:62]},
		{"too long", valid + "00"},
		{"zero key", strings.Repeat("0", 64)},
		{"above the curve order", strings.Repeat("f", 64)},
		{"spaces", " " + valid[1:]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := signer.NewRawKeySource(conf.EnvironmentDevelopment, []string{tt.key}, nil)
			requireNoSecret(t, err, tt.key)
			if !strings.Contains(err.Error(), "signers.rawKeys[0]") {
				t.Fatalf("error %q does not name the config entry", err)
			}
		})
	}
}

func TestRawKeySourceRejectsDuplicateAndUnknown(t *testing.T) {
	t.Parallel()
	key := newKey(t)
	if _, err := signer.NewRawKeySource(conf.EnvironmentDevelopment, []string{keyHex(key)}, []*ecdsa.PrivateKey{key}); err == nil {
		t.Fatal("the same key given twice was accepted")
	}
	src, err := signer.NewRawKeySource(conf.EnvironmentDevelopment, nil, []*ecdsa.PrivateKey{key})
	if err != nil {
		t.Fatal(err)
	}
	_, err = src.SignTx(context.Background(), addressOf(newKey(t)), dynamicFeeTx(0), testChainID)
	if !errors.Is(err, domain.ErrUnknownSigner) {
		t.Fatalf("got %v, want ErrUnknownSigner", err)
	}
	if _, err := src.SignTx(context.Background(), addressOf(key), dynamicFeeTx(0), nil); err == nil {
		t.Fatal("signing without a chain id was accepted")
	}
}
