package repositories_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// Retention deletes the oldest final transactions with their attempts and feed rows, in
// batches, stops at the first one younger than the horizon, and a cursor into what it
// deleted is refused as expired.
func TestRetentionPrunesTheOldestFinalTransactions(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := context.Background()
	feed, sequencer := newFeed(t, pool, feedPoll)
	now := time.Now()
	// 30 old, then 1 young, then 5 old: only the leading 30 may go (a leading run keeps the
	// feed gap-free above the retention mark).
	ages := make([]time.Duration, 0, 36)
	for range 30 {
		ages = append(ages, 48*time.Hour)
	}
	ages = append(ages, time.Minute)
	for range 5 {
		ages = append(ages, 48*time.Hour)
	}
	for i, age := range ages {
		id := uuid.New()
		if _, err := pool.Exec(ctx, `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, fencing_token, confirmed_at)
			VALUES (1337, $1, 'old-signer', '\x00', $2, '{"value":"0"}', 'CONFIRMED', 1, $3)`, id, i, now.Add(-age)); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO tx_attempt (chain_id, tx_hash, tx_id, signer, nonce, kind, max_fee_per_gas, max_priority_fee_per_gas, gas_limit, raw_tx, fencing_token)
			VALUES (1337, $1, $2, 'old-signer', $3, 'ORIGINAL', 1, 1, 21000, '\x00', 1)`, uuid.NewString(), id, i); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, "INSERT INTO tx_completions (chain_id, tx_id, signer, status, completed_at) VALUES (1337, $1, 'old-signer', 'CONFIRMED', $2)", id, now.Add(-age)); err != nil {
			t.Fatal(err)
		}
		if _, _, err := sequencer.Round(ctx); err != nil {
			t.Fatal(err)
		}
	}
	retention := services.NewRetention(services.RetentionConfig{Horizon: 24 * time.Hour, BatchSize: 7, MaxBatches: 100},
		repositories.NewRetentionRepository(pool), telemetry.Noop(), log.NewFilter(log.DefaultLogger, log.FilterLevel(log.LevelError)))
	pruned, err := retention.Prune(ctx)
	if err != nil || pruned != 30 {
		t.Fatalf("pruned %d transactions (%v), want the leading 30", pruned, err)
	}
	var txs, attempts, completions int
	if err := pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM managed_tx), (SELECT count(*) FROM tx_attempt), (SELECT count(*) FROM tx_completions)").
		Scan(&txs, &attempts, &completions); err != nil {
		t.Fatal(err)
	}
	if txs != 6 || attempts != 6 || completions != 6 {
		t.Fatalf("left %d transactions, %d attempts, %d completions; want 6 of each", txs, attempts, completions)
	}
	if _, err := feed.List(ctx, "", 10, nil, 0, 0); err != nil {
		t.Fatalf("reading from the start after pruning: %v", err)
	}
	if _, err := feed.List(ctx, "12", 10, nil, 0, 0); !errors.Is(err, services.ErrCursorExpired) {
		t.Fatalf("a cursor into pruned positions: %v, want ErrCursorExpired", err)
	}
	page, err := feed.List(ctx, "30", 100, nil, 0, 0)
	if err != nil || len(page.Completions) != 6 {
		t.Fatalf("from the retention mark: %d completions, %v; want the 6 left", len(page.Completions), err)
	}
}

// The horizon is measured by the database's clock, the one completed_at is written with:
// a node whose clock runs ahead cannot delete a completion early.
func TestRetentionMeasuresTheHorizonByTheDatabasesClock(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := context.Background()
	_, sequencer := newFeed(t, pool, feedPoll)
	id := uuid.New()
	if _, err := pool.Exec(ctx, `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, fencing_token, confirmed_at)
		VALUES (1337, $1, 'clock-signer', '\x00', 0, '{"value":"0"}', 'CONFIRMED', 1, now() - interval '30 minutes')`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO tx_completions (chain_id, tx_id, signer, status, completed_at) VALUES (1337, $1, 'clock-signer', 'CONFIRMED', now() - interval '30 minutes')", id); err != nil {
		t.Fatal(err)
	}
	if _, _, err := sequencer.Round(ctx); err != nil {
		t.Fatal(err)
	}
	store := repositories.NewRetentionRepository(pool)
	steps := []struct {
		horizon time.Duration
		want    int
	}{
		{time.Hour, 0},
		{10 * time.Minute, 1},
	}
	for _, s := range steps {
		p, err := store.PruneBatch(ctx, s.horizon, 10)
		if err != nil || p.Transactions != s.want {
			t.Fatalf("a horizon of %v pruned %d (%v), want %d of a completion 30 minutes old", s.horizon, p.Transactions, err, s.want)
		}
	}
}
