package services

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestChainsLookup(t *testing.T) {
	one := NewChains([]*ChainServices{{ID: 1337}})
	two := NewChains([]*ChainServices{{ID: 137}, {ID: 1}})
	tests := []struct {
		name    string
		chains  *Chains
		id      uint64
		want    uint64
		wantErr string
	}{
		{"one chain serves a request naming none", one, 0, 1337, ""},
		{"one chain serves a request naming it", one, 1337, 1337, ""},
		{"one chain refuses another", one, 1, 0, "chain 1 is not served here (served: 1337)"},
		{"several chains need a name", two, 0, 0, "required: this deployment serves chains 1, 137"},
		{"several chains serve the one named", two, 137, 137, ""},
		{"several chains refuse one not served", two, 5, 0, "chain 5 is not served here (served: 1, 137)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.chains.Lookup(tt.id)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Lookup(%d) = %v, %v; want an error naming %q", tt.id, got, err, tt.wantErr)
				}
				return
			}
			if err != nil || got.ID != tt.want {
				t.Fatalf("Lookup(%d) = %v, %v; want chain %d", tt.id, got, err, tt.want)
			}
		})
	}
	if ids := two.IDs(); len(ids) != 2 || ids[0] != 1 || ids[1] != 137 {
		t.Errorf("IDs() = %v, want [1 137]", ids)
	}
}

// identityMemory is a ChainIdentityStore in memory (pure logic under test).
type identityMemory struct{ recorded []ChainIdentity }

func (m *identityMemory) Record(_ context.Context, id ChainIdentity) error {
	for _, r := range m.recorded {
		if r.ChainID == id.ChainID {
			return nil
		}
	}
	m.recorded = append(m.recorded, id)
	return nil
}

func (m *identityMemory) List(context.Context) ([]ChainIdentity, error) { return m.recorded, nil }

func TestVerifyChainIdentity(t *testing.T) {
	mainnet := ChainIdentity{ChainID: "1", GenesisHash: "0xd4e5"}
	polygon := ChainIdentity{ChainID: "137", GenesisHash: "0xa9c2"}
	resetPolygon := ChainIdentity{ChainID: "137", GenesisHash: "0xffff"}
	tests := []struct {
		name       string
		recorded   []ChainIdentity
		serving    ChainIdentity
		addsChains bool
		wantErr    string
		wantStored int
	}{
		{"first start records", nil, mainnet, false, "", 1},
		{"the recorded chain starts", []ChainIdentity{mainnet}, mainnet, false, "", 1},
		{"another network in the single-chain form", []ChainIdentity{mainnet}, polygon, false, "belongs to chain id 1", 1},
		{"a chain added under chains", []ChainIdentity{mainnet}, polygon, true, "", 2},
		{"a reset chain under chains", []ChainIdentity{mainnet, polygon}, resetPolygon, true, "the chain was reset", 2},
		{"a reset chain in the single-chain form", []ChainIdentity{polygon}, resetPolygon, false, "the chain was reset", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			store := &identityMemory{recorded: append([]ChainIdentity(nil), tt.recorded...)}
			err := VerifyChainIdentity(context.Background(), store, tt.serving, tt.addsChains)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != "" && (!errors.Is(err, ErrOtherChain) || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("got %v, want ErrOtherChain naming %q", err, tt.wantErr)
			}
			if len(store.recorded) != tt.wantStored {
				t.Errorf("%d chains recorded, want %d", len(store.recorded), tt.wantStored)
			}
		})
	}
}
