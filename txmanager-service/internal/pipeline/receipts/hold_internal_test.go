package receipts

import (
	"testing"

	"github.com/bionicotaku/txmanager-service/internal/services"
)

// A receipt is held only when finality is at most holdWithinBlocks blocks away by count
// (a block above the head read counts from its own block); with the finalized tag
// deciding or many confirmations to go, it is written at once.
func TestHoldableOnlyCloseToFinality(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		block uint64
		head  uint64
		want  bool
	}{
		{"final already", Config{Confirmations: 2}, 10, 11, true},
		{"one block to go", Config{Confirmations: 2}, 10, 10, true},
		{"three blocks to go", Config{Confirmations: 4}, 10, 10, true},
		{"four blocks to go", Config{Confirmations: 5}, 10, 10, false},
		{"many confirmations", Config{Confirmations: 20}, 10, 10, false},
		{"many confirmations, nearly there", Config{Confirmations: 20}, 10, 27, true},
		{"no count set: one confirmation", Config{}, 10, 10, true},
		{"finalized tag decides", Config{Confirmations: 2, UseFinalizedTag: true}, 10, 11, false},
		{"block above the head read", Config{Confirmations: 2}, 12, 11, true},
		{"block above the head read, many confirmations", Config{Confirmations: 20}, 12, 11, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := FoundReceipt{Receipt: services.Receipt{BlockNumber: tt.block}}
			if got := holdable(tt.cfg, r, tt.head); got != tt.want {
				t.Errorf("holdable = %v, want %v", got, tt.want)
			}
		})
	}
}
