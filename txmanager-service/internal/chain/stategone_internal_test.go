package chain

import (
	"errors"
	"testing"
)

// The answers of nodes that no longer hold a block's state are told from other failures of a
// state read: only those leave an L1 fee unknown for good.
func TestStateGone(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{errors.New("historical state 0x56e8... is not available"), true}, // geth, op-geth
		{errors.New("missing trie node 0xabc (path ) state 0xabc is not available"), true},
		{errors.New("BlockOutOfRange(1, 1000)"), true}, // anvil
		{errors.New("Not historic state found for block"), true},
		{errors.New("state at block #12 is pruned"), true}, // erigon, reth
		{errors.New("429 Too Many Requests"), false},
		{errors.New("context deadline exceeded"), false},
		{errors.New("header not found"), false},
		{nil, false},
	}
	for _, tc := range tests {
		if got := stateGone(tc.err); got != tc.want {
			t.Errorf("stateGone(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
