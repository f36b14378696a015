package e2e

import (
	"testing"

	"github.com/ethereum/go-ethereum/crypto"
)

// The keys are pinned: a suite, a log, or a person debugging a run relies on signer i
// being the same account every time.
func TestKeysAreDeterministic(t *testing.T) {
	t.Parallel()
	tests := []struct {
		index   int
		keyHex  string
		address string
	}{
		{0, "0x0b861d377257b5360f3aaa60c4a10b24df3ffc65d27d83ed51faa75f2b374994", "0x895e9C2960b3FA35A9576330b1ba6ec0212F71D6"},
		{1, "0xa7d2f66ea0894e086a8c740712611864d5dc3e3ed4e84b3ed36ad37983e97401", "0x17FDCB960e929d2D3EADc501531fA1694d87a79E"},
		{2, "0xfe864301039df4eb693dc1dac5ae609468db67bad6da4de5382bc8d4bbc3fcd0", "0xe905f9C991ca38D1a41DE0a840B3d1b18521FFaD"},
	}
	keys, again := Keys(3), Keys(5)
	for _, tt := range tests {
		if got := KeyHex(keys[tt.index]); got != tt.keyHex {
			t.Errorf("Keys(3)[%d] = %s, want %s", tt.index, got, tt.keyHex)
		}
		if got := Address(keys[tt.index]).Hex(); got != tt.address {
			t.Errorf("address of key %d = %s, want %s", tt.index, got, tt.address)
		}
		if got := KeyHex(again[tt.index]); got != tt.keyHex {
			t.Errorf("Keys(5)[%d] = %s, want the same key as Keys(3)[%d]", tt.index, got, tt.index)
		}
	}
}

func TestKeyFromSeedRehashesInvalidScalars(t *testing.T) {
	t.Parallel()
	zero := make([]byte, 32)
	tests := []struct {
		name string
		seed []byte
		want []byte
	}{
		{"valid seed is the key", crypto.Keccak256([]byte("x")), crypto.Keccak256([]byte("x"))},
		{"zero is not a key: hashed once", zero, crypto.Keccak256(zero)},
	}
	for _, tt := range tests {
		if got := crypto.FromECDSA(keyFromSeed(tt.seed)); string(got) != string(tt.want) {
			t.Errorf("%s: key %x, want %x", tt.name, got, tt.want)
		}
	}
}

func TestRecipientIsNoSigner(t *testing.T) {
	t.Parallel()
	if got, want := Recipient().Hex(), "0x4592656b7deFDFdCA476Dd9ABE66A83A9CA53470"; got != want {
		t.Errorf("Recipient() = %s, want %s", got, want)
	}
	for i, addr := range Addresses(Keys(10)) {
		if addr == Recipient() {
			t.Errorf("signer %d is the recipient", i)
		}
	}
}
