package domain

import (
	"encoding/binary"
	"testing"

	"github.com/ethereum/go-ethereum/common"
)

func TestChecksumCacheAnswersEachAddressItsOwnForm(t *testing.T) {
	// Two addresses that share a slot (same last four bytes), and one elsewhere.
	a := common.HexToAddress("0x52908400098527886E0F7030069857D2E4169EE7")
	b := a
	b[0] ^= 0xff
	var c common.Address
	binary.BigEndian.PutUint32(c[common.AddressLength-4:], binary.BigEndian.Uint32(a[common.AddressLength-4:])+1)
	var cache checksumCache
	tests := []struct {
		name string
		addr common.Address
	}{
		{"first use", a},
		{"cached", a},
		{"a colliding address replaces it", b},
		{"the first again after the collision", a},
		{"another slot", c},
		{"the zero address", common.Address{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got, want := cache.hex(tc.addr), tc.addr.Hex(); got != want {
				t.Fatalf("hex(%x) = %s, want %s", tc.addr, got, want)
			}
		})
	}
}

func BenchmarkChecksumCache(b *testing.B) {
	addr := common.HexToAddress("0x52908400098527886E0F7030069857D2E4169EE7")
	b.Run("Address.Hex", func(b *testing.B) {
		for b.Loop() {
			_ = addr.Hex()
		}
	})
	b.Run("cached", func(b *testing.B) {
		var cache checksumCache
		for b.Loop() {
			_ = cache.hex(addr)
		}
	})
}
