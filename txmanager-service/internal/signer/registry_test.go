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

// Signers go into and out of service at run time: a source added serves at once, a
// retiring signer keeps signing (its unfinished transactions) but refuses new creates, a
// retired one neither, its key source released; a signer made active again serves again.
func TestRegistryRosterLifecycle(t *testing.T) {
	t.Parallel()
	configured, added := newKey(t), newKey(t)
	registry, err := signer.NewRegistryFromSources(rawSource(t, configured))
	if err != nil {
		t.Fatal(err)
	}
	released := 0
	if err := registry.Add(rawSource(t, added), func() { released++ }, domain.RosterActive, false); err != nil {
		t.Fatal(err)
	}
	if err := registry.Add(rawSource(t, added), nil, domain.RosterActive, false); err == nil {
		t.Fatal("a second key source for a held signer was accepted")
	}
	if err := registry.Add(rawSource(t, newKey(t), newKey(t)), nil, domain.RosterActive, false); err == nil {
		t.Fatal("a run-time source with two signers was accepted")
	}
	tests := []struct {
		name       string
		signer     *ecdsa.PrivateKey
		state      domain.RosterState
		wantAccept error
		wantSigns  bool
		wantReleas int
	}{
		{"added serves", added, domain.RosterActive, nil, true, 0},
		{"added retiring signs, refuses creates", added, domain.RosterRetiring, domain.ErrSignerRetired, true, 0},
		{"configured retiring", configured, domain.RosterRetiring, domain.ErrSignerRetired, true, 0},
		{"configured active again", configured, domain.RosterActive, nil, true, 0},
		{"added retired: key dropped and released", added, domain.RosterRetired, domain.ErrSignerRetired, false, 1},
		{"retired again releases nothing more", added, domain.RosterRetired, domain.ErrSignerRetired, false, 1},
		{"configured retired", configured, domain.RosterRetired, domain.ErrSignerRetired, false, 1},
		{"a state this version does not know refuses", configured, domain.RosterState("paused"), domain.ErrSignerRetired, false, 1},
	}
	for _, tt := range tests { // in order: each step builds on the one before
		registry.SetState(addressOf(tt.signer), tt.state)
		if err := registry.Accepts(addressOf(tt.signer)); !errors.Is(err, tt.wantAccept) || (tt.wantAccept == nil) != (err == nil) {
			t.Fatalf("%s: Accepts = %v, want %v", tt.name, err, tt.wantAccept)
		}
		_, err := registry.SignTx(context.Background(), addressOf(tt.signer), dynamicFeeTx(1), testChainID)
		if (err == nil) != tt.wantSigns {
			t.Fatalf("%s: SignTx error %v, want signing %t", tt.name, err, tt.wantSigns)
		}
		if released != tt.wantReleas {
			t.Fatalf("%s: source released %d times, want %d", tt.name, released, tt.wantReleas)
		}
	}
	if err := registry.Accepts(addressOf(newKey(t))); !errors.Is(err, domain.ErrUnknownSigner) {
		t.Fatalf("Accepts of an unknown signer = %v, want ErrUnknownSigner", err)
	}
	// Added again after retirement, with a new source: it serves.
	if err := registry.Add(rawSource(t, added), nil, domain.RosterActive, false); err != nil {
		t.Fatal(err)
	}
	if err := registry.Accepts(addressOf(added)); err != nil {
		t.Fatalf("re-added signer refused: %v", err)
	}
}

// A key added at run time takes its roster standing in the same step: a retiring or
// paused signer's key never serves a create, not even in the moment after it arrives; a
// retired signer's key is not taken at all.
func TestAKeyAddedTakesItsStandingInTheSameStep(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		state      domain.RosterState
		paused     bool
		wantAdded  bool
		wantAccept error
	}{
		{"active", domain.RosterActive, false, true, nil},
		{"retiring", domain.RosterRetiring, false, true, domain.ErrSignerRetired},
		{"paused", domain.RosterActive, true, true, domain.ErrSignerPaused},
		{"retired", domain.RosterRetired, false, false, domain.ErrUnknownSigner},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			registry, err := signer.NewRegistryFromSources(rawSource(t, newKey(t)))
			if err != nil {
				t.Fatal(err)
			}
			key := newKey(t)
			err = registry.Add(rawSource(t, key), nil, tt.state, tt.paused)
			if (err == nil) != tt.wantAdded {
				t.Fatalf("Add = %v, want added %t", err, tt.wantAdded)
			}
			if err := registry.Accepts(addressOf(key)); !errors.Is(err, tt.wantAccept) || (tt.wantAccept == nil) != (err == nil) {
				t.Fatalf("Accepts right after Add = %v, want %v", err, tt.wantAccept)
			}
			_, err = registry.SignTx(context.Background(), addressOf(key), dynamicFeeTx(1), testChainID)
			if (err == nil) != tt.wantAdded {
				t.Fatalf("SignTx = %v, want signing %t: a held key signs its unfinished transactions whatever its standing", err, tt.wantAdded)
			}
		})
	}
}

// Signing goes on while signers are added and retired (readers see one view at a time).
func TestRegistryChangesWhileSigning(t *testing.T) {
	t.Parallel()
	steady := newKey(t)
	registry, err := signer.NewRegistryFromSources(rawSource(t, steady))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	errs := make(chan error, 1)
	go func() {
		defer close(errs)
		for {
			select {
			case <-done:
				return
			default:
			}
			if _, err := registry.SignTx(context.Background(), addressOf(steady), dynamicFeeTx(2), testChainID); err != nil {
				errs <- err
				return
			}
		}
	}()
	for range 50 {
		k := newKey(t)
		if err := registry.Add(rawSource(t, k), nil, domain.RosterActive, false); err != nil {
			t.Fatal(err)
		}
		registry.SetState(addressOf(k), domain.RosterRetired)
	}
	close(done)
	if err := <-errs; err != nil {
		t.Fatalf("signing for a steady signer failed during changes: %v", err)
	}
}
