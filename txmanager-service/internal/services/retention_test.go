package services_test

import (
	"fmt"
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

// Service events past the horizon go too, oldest first, in batches; younger ones stay.
func TestRetentionPrunesServiceEvents(t *testing.T) {
	t.Parallel()
	f := newFeedFixture(t)
	for i, age := range []string{"3 days", "3 days", "2 days", "1 minute"} {
		if _, err := f.pool.Exec(t.Context(), `INSERT INTO service_event (position, event_id, kind, chain_id, signer, payload, at)
			VALUES ($1, $2, 'signer.low_balance', 1337, '0xabc', '{}', now() - $3::interval)`, i+1, fmt.Sprint("event-", i), age); err != nil {
			t.Fatal(err)
		}
	}
	retention := services.NewRetention(services.RetentionConfig{Horizon: 24 * time.Hour, BatchSize: 2, MaxBatches: 5}, repositories.NewRetentionRepository(f.pool),
		telemetry.Noop(), testLogger())
	if _, err := retention.Prune(t.Context()); err != nil {
		t.Fatal(err)
	}
	var kept []int64
	rows, err := f.pool.Query(t.Context(), "SELECT position FROM service_event ORDER BY position")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var p int64
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		kept = append(kept, p)
	}
	if fmt.Sprint(kept) != "[4]" {
		t.Fatalf("service events kept at positions %v, want only the young one [4]", kept)
	}
}
