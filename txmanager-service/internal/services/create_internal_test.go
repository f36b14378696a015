package services

import "testing"

// An estimate is padded for state that moves before the block, bounded by the deployment's
// limit, and never padded past EIP-7825's cap (2^24) when it is within it.
func TestPadEstimate(t *testing.T) {
	t.Parallel()
	const cap7825 = 1 << 24
	tests := []struct {
		name       string
		estimate   uint64
		multiplier float64
		max        uint64
		want       uint64
	}{
		{"a transfer", 21_000, 1.2, 30_000_000, 25_200},
		{"no multiplier pads nothing", 21_000, 0, 30_000_000, 21_000},
		{"padding stops at the deployment's limit", 28_000_000, 1.2, 30_000_000, 30_000_000},
		{"a call near EIP-7825's cap is padded up to it, not past it", 14_000_000, 1.2, 30_000_000, cap7825},
		{"a call exactly at the cap", cap7825, 1.2, 30_000_000, cap7825},
		{"a call above the cap (a chain without it) is padded as before", 20_000_000, 1.2, 30_000_000, 24_000_000},
		{"a low deployment limit still wins", 14_000_000, 1.2, 15_000_000, 15_000_000},
	}
	for _, tc := range tests {
		if got := PadGasEstimate(tc.estimate, tc.multiplier, tc.max); got != tc.want {
			t.Errorf("%s: PadGasEstimate(%d, %v, %d) = %d, want %d", tc.name, tc.estimate, tc.multiplier, tc.max, got, tc.want)
		}
	}
}
