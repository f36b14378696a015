package e2e

import (
	"slices"
	"testing"
)

func TestCheckNonces(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		nonces     []uint64
		want       uint64
		ok         bool
		distinct   int
		missing    []uint64
		duplicates []uint64
		outOfRange []uint64
	}{
		{name: "contiguous, any order", nonces: []uint64{2, 0, 3, 1}, want: 4, ok: true, distinct: 4},
		{name: "none wanted, none used", nonces: nil, want: 0, ok: true, distinct: 0},
		{name: "gap", nonces: []uint64{0, 1, 3}, want: 4, distinct: 3, missing: []uint64{2}},
		{name: "reuse", nonces: []uint64{0, 1, 1, 2}, want: 4, distinct: 3, missing: []uint64{3}, duplicates: []uint64{1}},
		{name: "shifted up", nonces: []uint64{1, 2, 3}, want: 3, distinct: 3, missing: []uint64{0}, outOfRange: []uint64{3}},
	}
	for _, tt := range tests {
		got := CheckNonces(tt.nonces, tt.want)
		if got.OK() != tt.ok || got.Distinct != tt.distinct || !slices.Equal(got.Missing, tt.missing) ||
			!slices.Equal(got.Duplicates, tt.duplicates) || !slices.Equal(got.OutOfRange, tt.outOfRange) {
			t.Errorf("%s: CheckNonces(%v, %d) = %+v (ok %t), want ok %t distinct %d missing %v duplicates %v out of range %v",
				tt.name, tt.nonces, tt.want, got, got.OK(), tt.ok, tt.distinct, tt.missing, tt.duplicates, tt.outOfRange)
		}
	}
}

func TestNonceReportStringAbbreviates(t *testing.T) {
	t.Parallel()
	got := CheckNonces(nil, 10).String()
	want := "0 distinct, missing [0 1 2 3 4 5 6 7]... (10), duplicated [], out of range []"
	if got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
