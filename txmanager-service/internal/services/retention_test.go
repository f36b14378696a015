package services_test

import (
	"testing"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// Retention deletes what is final and past the horizon, a bounded number of batches per
// pass so a backlog is worked off over several passes; no horizon keeps everything.
func TestRetentionPrune(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		horizon    time.Duration
		wantPasses []int // transactions each pass deletes
	}{
		{"no horizon keeps everything", 0, []int{0, 0}},
		{"a backlog is worked off pass by pass", 24 * time.Hour, []int{4, 1, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFeedFixture(t)
			for i := range 5 {
				id := f.complete(t, "0xold", i)
				if _, err := f.pool.Exec(t.Context(), "UPDATE tx_completions SET completed_at = now() - interval '2 days' WHERE tx_id = $1", id); err != nil {
					t.Fatal(err)
				}
			}
			young := f.complete(t, "0xyoung", 0)
			f.round(t)
			retention := services.NewRetention(services.RetentionConfig{Horizon: tc.horizon, BatchSize: 2, MaxBatches: 2}, repositories.NewRetentionRepository(f.pool),
				telemetry.Noop(), testLogger())
			for i, want := range tc.wantPasses {
				if got, err := retention.Prune(t.Context()); err != nil || got != want {
					t.Fatalf("pass %d deleted %d (%v), want %d", i, got, err, want)
				}
			}
			var kept int
			if err := f.pool.QueryRow(t.Context(), "SELECT count(*) FROM managed_tx WHERE tx_id = $1", young).Scan(&kept); err != nil || kept != 1 {
				t.Fatalf("the young transaction: %d rows (%v), want it kept", kept, err)
			}
		})
	}
}
