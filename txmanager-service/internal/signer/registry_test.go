package signer_test

import (
	"context"
	"crypto/ecdsa"
	"errors"
	"slices"
	"testing"

	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/signer"
)

func rawSource(t *testing.T, keys ...*ecdsa.PrivateKey) *signer.RawKeySource {
	t.Helper()
	src, err := signer.NewRawKeySource(conf.EnvironmentDevelopment, nil, keys)
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func TestRegistryDispatchesToTheOwningSource(t *testing.T) {
	t.Parallel()
	a, b, c := newKey(t), newKey(t), newKey(t)
	external := newExternal(t, serveRPC(t, &fakeClef{key: c, chainID: testChainID}), addressOf(c))
	registry, err := signer.NewRegistryFromSources(rawSource(t, a), rawSource(t, b), external)
	if err != nil {
		t.Fatal(err)
	}
	got := registry.Addresses()
	if !slices.IsSortedFunc(got, common.Address.Cmp) || !sameAddresses(got, []common.Address{addressOf(a), addressOf(b), addressOf(c)}) {
		t.Fatalf("addresses %v are not the three signers, sorted", got)
	}
	for _, key := range []*ecdsa.PrivateKey{a, b, c} {
		if !registry.Manages(addressOf(key)) {
			t.Fatalf("does not manage %s", addressOf(key).Hex())
		}
		tx := dynamicFeeTx(11)
		signed, err := registry.SignTx(context.Background(), addressOf(key), tx, testChainID)
		if err != nil {
			t.Fatal(err)
		}
		requireSignedBy(t, signed, tx, addressOf(key))
	}
	// clef takes a few signatures at a time; the raw keys in process have no limit.
	for key, want := range map[*ecdsa.PrivateKey]int{a: 0, b: 0, c: 4} {
		if got := registry.MaxInFlight(addressOf(key)); got != want {
			t.Errorf("MaxInFlight(%s) = %d, want %d", addressOf(key).Hex(), got, want)
		}
	}
}

func TestRegistryRejectsAnAddressHeldTwice(t *testing.T) {
	t.Parallel()
	shared := newKey(t)
	external := newExternal(t, serveRPC(t, &fakeClef{key: shared, chainID: testChainID}), addressOf(shared))
	tests := []struct {
		name    string
		sources []signer.Source
	}{
		{"two raw sources", []signer.Source{rawSource(t, shared), rawSource(t, newKey(t), shared)}},
		{"raw and external", []signer.Source{rawSource(t, shared), external}},
		{"nil source", []signer.Source{rawSource(t, shared), nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if r, err := signer.NewRegistryFromSources(tt.sources...); err == nil {
				t.Fatalf("built a registry of %v", r.Addresses())
			}
		})
	}
}

func TestRegistryUnknownSigner(t *testing.T) {
	t.Parallel()
	held, listedOnly := newKey(t), newKey(t)
	fromSources, err := signer.NewRegistryFromSources(rawSource(t, held))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		registry *signer.Registry
		from     common.Address
		manages  bool
	}{
		{"address no source holds", fromSources, addressOf(newKey(t)), false},
		{"address-only registry", signer.NewRegistry([]common.Address{addressOf(listedOnly), addressOf(listedOnly)}), addressOf(listedOnly), true},
		{"empty address-only registry", signer.NewRegistry(nil), addressOf(held), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.registry.Manages(tt.from); got != tt.manages {
				t.Fatalf("Manages = %v, want %v", got, tt.manages)
			}
			_, err := tt.registry.SignTx(context.Background(), tt.from, dynamicFeeTx(0), testChainID)
			if !errors.Is(err, domain.ErrUnknownSigner) {
				t.Fatalf("got %v, want ErrUnknownSigner", err)
			}
		})
	}
	if got := signer.NewRegistry([]common.Address{addressOf(listedOnly), addressOf(listedOnly)}).Addresses(); len(got) != 1 {
		t.Fatalf("address-only registry lists %v, want one address", got)
	}
}
