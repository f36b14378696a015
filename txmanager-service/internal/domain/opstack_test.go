package domain_test

import (
	"bytes"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

func TestFastLZCompressedLen(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	random := make([]byte, 4096)
	for i := range random {
		random[i] = byte(r.Uint32())
	}
	// atMost marks a size the test bounds rather than names: compressible input.
	tests := []struct {
		name   string
		input  []byte
		want   int
		atMost bool
	}{
		{"empty", nil, 0, false},
		{"shorter than the tail: one literal run", []byte("hello"), 6, false},
		{"random data grows by a byte per 32", random, 4096 + 4096/32, false},
		{"a period-8 pattern matches itself", bytes.Repeat([]byte{1, 2, 3, 4, 5, 6, 7, 8}, 4), 31, true},
		{"a run of zeros compresses to a few bytes", make([]byte, 1000), 30, true},
	}
	for _, tc := range tests {
		got := domain.FastLZCompressedLen(tc.input)
		if (tc.atMost && got > tc.want) || (!tc.atMost && got != tc.want) {
			t.Errorf("%s: %d bytes, want %d (at most: %v)", tc.name, got, tc.want, tc.atMost)
		}
	}
}

// The fee of a small transaction is the Fjord rule's minimum size at the block's prices;
// the figure is what anvil 1.7.1's OP-stack EVM charged a transfer at these prices.
func TestOPStackL1Fee(t *testing.T) {
	t.Parallel()
	p := domain.OPStackFeeParams{L1BaseFee: big.NewInt(30_000_000_000), BlobBaseFee: big.NewInt(2_000_000_000), BaseFeeScalar: 1368, BlobBaseFeeScalar: 810949}
	if got := p.L1Fee(make([]byte, 110)); got.Cmp(big.NewInt(227_853_800_000)) != 0 {
		t.Errorf("a transfer's L1 fee: %s, want 227853800000 (as the node charged)", got)
	}
	if got := (domain.OPStackFeeParams{}).L1Fee(make([]byte, 110)); got.Sign() != 0 {
		t.Errorf("no L1 prices, fee %s, want 0", got)
	}
	// The upper bound holds whatever the content, incompressible data included.
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 50, 500, 5000, 50000} {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(r.Uint32())
		}
		// A signed transaction is its unsigned form plus at most 68 bytes of signature.
		if fee, bound := p.L1Fee(append(data, make([]byte, 68)...)), p.L1FeeUpperBound(n); bound.Cmp(fee) < 0 {
			t.Errorf("%d random bytes: bound %s below the fee %s", n, bound, fee)
		}
	}
}
