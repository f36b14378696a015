package services

import (
	"testing"
)

// A batch's id is stable for the same events and differs for other events at the same
// positions (a database restored from a backup gives positions again): a receiver that
// deduplicates on Idempotency-Key drops a batch sent again, never a different one.
func TestBatchIDsTellBatchesAtTheSamePositionsApart(t *testing.T) {
	batch := func(ids ...string) []pushed {
		out := make([]pushed, len(ids))
		for i, id := range ids {
			out[i] = pushed{cursor: []string{"41", "42"}[i], id: id, body: func() []byte { return []byte(`{}`) }}
		}
		return out
	}
	c := ClaimedSubscription{BatchSize: 10}
	tests := []struct {
		name     string
		a, b     []pushed
		wantSame bool
	}{
		{"the same batch sent again", batch("completion:a", "completion:b"), batch("completion:a", "completion:b"), true},
		{"other events at the same positions", batch("completion:a", "completion:b"), batch("completion:c", "completion:d"), false},
		{"one event of two changed", batch("completion:a", "completion:b"), batch("completion:a", "completion:x"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			first, _ := deliveryOf(c, tc.a)
			second, _ := deliveryOf(c, tc.b)
			if (first == second) != tc.wantSame {
				t.Fatalf("ids %q and %q: same %v, want %v", first, second, first == second, tc.wantSame)
			}
		})
	}
}
