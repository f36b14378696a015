package repositories_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
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

// Retention keeps, for each signer, the newest mined transaction it deleted: a recovery after
// a database loss starts its chain scan there when nothing of the signer is left on record,
// instead of at the chain's first block. Later batches move it forward, never back, and it
// is only an anchor below the first unknown nonce.
func TestRetentionLeavesEachSignerARecoveryAnchor(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := context.Background()
	_, sequencer := newFeed(t, pool, feedPoll)
	const signer = "0x00000000000000000000000000000000000000a7"
	// Nonces 0..5 mined in blocks 100..105 and final two days ago; nonce 6 is young.
	insert := func(nonce int, age time.Duration) {
		t.Helper()
		id := uuid.New()
		if _, err := pool.Exec(ctx, `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, fencing_token, confirmed_at, tx_hash, block_number)
			VALUES (1337, $1, $2, '\x00', $3, '{"value":"0"}', 'CONFIRMED', 1, now() - $4::interval, $5, $6)`,
			id, signer, nonce, fmt.Sprintf("%d seconds", int(age.Seconds())), fmt.Sprintf("0x%064x", nonce), 100+nonce); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, "INSERT INTO tx_completions (chain_id, tx_id, signer, status, completed_at) VALUES (1337, $1, $2, 'CONFIRMED', now() - $3::interval)",
			id, signer, fmt.Sprintf("%d seconds", int(age.Seconds()))); err != nil {
			t.Fatal(err)
		}
		if _, _, err := sequencer.Round(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for nonce := range 6 {
		insert(nonce, 48*time.Hour)
	}
	insert(6, time.Minute)
	retention := repositories.NewRetentionRepository(pool)
	recovery := repositories.NewReconcileRepository(pool, testChain())

	steps := []struct {
		name       string
		batch      int
		below      uint64
		wantNonces []uint64
		wantBlock  uint64
	}{
		// The first batch deletes nonces 0..2: nonce 2 anchors; the rows on record come first.
		{name: "first batch", batch: 3, below: 7, wantNonces: []uint64{6, 5, 4, 3, 2}, wantBlock: 102},
		// The second deletes 3..5: the anchor moves to 5, and stands in for all of them.
		{name: "second batch", batch: 10, below: 7, wantNonces: []uint64{6, 5}, wantBlock: 105},
		// An anchor at or above the first unknown nonce says nothing about where it was mined.
		{name: "below the anchor", batch: 0, below: 5, wantNonces: nil},
	}
	for _, s := range steps {
		if s.batch > 0 {
			if _, err := retention.PruneBatch(ctx, 24*time.Hour, s.batch); err != nil {
				t.Fatalf("%s: prune: %v", s.name, err)
			}
		}
		anchors, err := recovery.RecoveryAnchors(ctx, signer, s.below, 16)
		if err != nil {
			t.Fatalf("%s: anchors: %v", s.name, err)
		}
		var nonces []uint64
		for _, a := range anchors {
			nonces = append(nonces, a.Nonce)
		}
		if !slices.Equal(nonces, s.wantNonces) {
			t.Fatalf("%s: anchors below nonce %d at nonces %v, want %v", s.name, s.below, nonces, s.wantNonces)
		}
		if s.wantBlock > 0 {
			// The deleted transaction's block and hash, for the recovery to ask the node.
			last := anchors[len(anchors)-1]
			if last.Block != s.wantBlock || last.Hash != common.HexToHash(fmt.Sprintf("0x%064x", last.Nonce)) {
				t.Fatalf("%s: the pruned anchor %+v, want block %d and the transaction's hash", s.name, last, s.wantBlock)
			}
		}
	}
}

// Retention keeps the service events an active webhook subscription has still to deliver,
// whatever its horizon: events carry no mark of what retention took, and a node that
// delivers no webhooks may run retention with a horizon shorter than webhooks.deadAfter.
// A paused or dead subscription holds nothing (it is told it missed them when resumed), nor
// does one no node has delivered for longer than the horizon.
func TestRetentionKeepsServiceEventsAnActiveSubscriptionHasNotDelivered(t *testing.T) {
	t.Parallel()
	// subscriptionAt is a subscription's state and event cursor, how long ago a node last
	// held its lease (0: never, created ten minutes ago), and whether that node released it
	// stopping after a delivery then.
	type subscriptionAt struct {
		state     string
		cursor    int64
		leaseLeft time.Duration
		released  bool
	}
	tests := []struct {
		name          string
		subscriptions []subscriptionAt
		wantLeft      []int64
	}{
		{"no subscription", nil, nil},
		{"an active one at 2", []subscriptionAt{{"active", 2, 0, false}}, []int64{3, 4, 5}},
		{"an active one at 4 and one at 1", []subscriptionAt{{"active", 4, 0, false}, {"active", 1, 0, false}}, []int64{2, 3, 4, 5}},
		{"a paused one at 0 and a dead one at 0", []subscriptionAt{{"paused", 0, 0, false}, {"dead", 0, 0, false}}, nil},
		{"an active one at the head", []subscriptionAt{{"active", 5, 0, false}}, nil},
		{"an active one at 2 delivered a minute ago", []subscriptionAt{{"active", 2, time.Minute, false}}, []int64{3, 4, 5}},
		// Webhooks off on every node: nothing delivers it, and retention goes on.
		{"an active one at 2 no node delivered for longer than the horizon", []subscriptionAt{{"active", 2, 2 * time.Hour, false}}, nil},
		// A rolling restart: the node stopping released the lease of a subscription it was
		// delivering with a backlog.
		{"an active one at 2 released by a node stopping a minute ago", []subscriptionAt{{"active", 2, time.Minute, true}}, []int64{3, 4, 5}},
		{"an active one at 2 released by a node stopping two hours ago", []subscriptionAt{{"active", 2, 2 * time.Hour, true}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := testsupport.MigratedPool(t)
			ctx := context.Background()
			for position := int64(1); position <= 5; position++ {
				if _, err := pool.Exec(ctx, `INSERT INTO service_event (position, event_id, kind, chain_id, signer, payload, at)
					VALUES ($1, $2, 'signer.balance_low', 1337, 'old-signer', '{}', now() - interval '2 days')`, position, fmt.Sprint("event-", position)); err != nil {
					t.Fatal(err)
				}
			}
			for _, s := range tc.subscriptions {
				var leaseExpired, delivered *time.Time
				created := time.Now().Add(-10 * time.Minute)
				if s.leaseLeft > 0 {
					created = time.Now().Add(-3 * time.Hour)
					at := time.Now().Add(-s.leaseLeft)
					if leaseExpired = &at; s.released {
						leaseExpired, delivered = nil, &at
					}
				}
				if _, err := pool.Exec(ctx, `INSERT INTO webhook_subscription (subscription_id, url, secret, filter, state, cursor, event_cursor, created_by, created_at,
						lease_expires_at, last_success_at)
					VALUES ($1, 'https://hooks.example/a', 'whsec_0123456789abcdef', '{}', $2, 0, $3, 'ops', $6, $4, $5)`,
					uuid.New(), s.state, s.cursor, leaseExpired, delivered, created); err != nil {
					t.Fatal(err)
				}
			}
			n, err := repositories.NewRetentionRepository(pool).PruneEvents(ctx, time.Hour, 100)
			if err != nil {
				t.Fatal(err)
			}
			rows, err := pool.Query(ctx, "SELECT position FROM service_event ORDER BY position")
			if err != nil {
				t.Fatal(err)
			}
			var left []int64
			for rows.Next() {
				var p int64
				if err := rows.Scan(&p); err != nil {
					t.Fatal(err)
				}
				left = append(left, p)
			}
			if rows.Err() != nil {
				t.Fatal(rows.Err())
			}
			if !slices.Equal(left, tc.wantLeft) || n != 5-len(tc.wantLeft) {
				t.Fatalf("pruned %d, left %v; want left %v", n, left, tc.wantLeft)
			}
		})
	}
}
