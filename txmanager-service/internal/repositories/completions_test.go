package repositories_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"
	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// Property: while many writers commit completions concurrently and out of sequence order
// (and some roll back), a consumer paging with the returned cursor receives every
// committed completion exactly once and never a rolled-back one.
func TestCompletionsFeedDeliversEachCommittedCompletionExactlyOnce(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := context.Background()
	const writers, perWriter = 8, 60
	ids := make([]uuid.UUID, writers*perWriter)
	for i := range ids {
		ids[i] = uuid.New()
	}
	if _, err := pool.Exec(ctx, `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, fencing_token)
		SELECT 1337, id, 'feed-signer', '\x00', ordinality, '{"value":"0"}', 'CONFIRMED', 1 FROM unnest($1::uuid[]) WITH ORDINALITY AS t(id, ordinality)`, ids); err != nil {
		t.Fatal(err)
	}

	var committed sync.Map // tx id -> true once its insert committed
	var rolledBack sync.Map
	var committedCount atomic.Int64
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 42))
			mine := ids[w*perWriter : (w+1)*perWriter]
			for i := 0; i < len(mine); {
				batch := mine[i:min(len(mine), i+1+r.IntN(3))]
				i += len(batch)
				abort := r.IntN(10) == 0
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					for _, id := range batch {
						if _, err := tx.Exec(ctx, "INSERT INTO tx_completions (chain_id, tx_id, signer, status) VALUES (1337, $1, 'feed-signer', 'CONFIRMED')", id); err != nil {
							return err
						}
					}
					// Hold the transaction open a random while: sequence numbers are taken
					// now, commits happen later and in another order.
					time.Sleep(time.Duration(r.IntN(25)) * time.Millisecond)
					if abort {
						return errRollback
					}
					return nil
				})
				switch {
				case abort:
					for _, id := range batch {
						rolledBack.Store(id, true)
					}
				case err != nil:
					t.Errorf("writer %d: %v", w, err)
					return
				default:
					for _, id := range batch {
						committed.Store(id, true)
						committedCount.Add(1)
					}
				}
			}
		}()
	}
	writersDone := make(chan struct{})
	go func() { wg.Wait(); close(writersDone) }()

	// Three sequencers, as on three nodes, position what commits while the writers run.
	feed, sequencer := newFeed(t, pool)
	stopSequencers := make(chan struct{})
	var sequencers sync.WaitGroup
	for range 3 {
		sequencers.Go(func() {
			for {
				select {
				case <-stopSequencers:
					return
				case <-time.After(time.Duration(rand.IntN(5)) * time.Millisecond):
				}
				if _, _, err := sequencer.Round(ctx); err != nil {
					t.Errorf("sequencer: %v", err)
					return
				}
			}
		})
	}
	defer func() { close(stopSequencers); sequencers.Wait() }()
	seen := map[uuid.UUID]int{}
	cursor := ""
	r := rand.New(rand.NewPCG(7, 7))
	done := false
	deadline := time.Now().Add(60 * time.Second)
	for !done {
		if time.Now().After(deadline) {
			t.Fatalf("consumer saw %d of %d committed completions before the deadline", len(seen), committedCount.Load())
		}
		select {
		case <-writersDone:
			// Drain: once writers are done and a page comes back empty with everything
			// seen, the feed is complete.
			if int64(len(seen)) == committedCount.Load() {
				done = true
			}
		default:
		}
		page, err := feed.List(ctx, cursor, 1+r.IntN(9), nil, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range page.Completions {
			seen[c.TxID]++
		}
		cursor = page.Next
		if len(page.Completions) == 0 {
			time.Sleep(2 * time.Millisecond)
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("completion %s delivered %d times", id, n)
		}
		if _, ok := rolledBack.Load(id); ok {
			t.Fatalf("rolled-back completion %s delivered", id)
		}
		if _, ok := committed.Load(id); !ok {
			t.Fatalf("delivered %s that no writer committed", id)
		}
	}
	t.Logf("%d committed completions delivered exactly once; %d rolled back never seen", len(seen), lenOf(&rolledBack))
}

var errRollback = fmt.Errorf("deliberate rollback")

func lenOf(m *sync.Map) int {
	n := 0
	m.Range(func(any, any) bool { n++; return true })
	return n
}

// newFeed builds the feed use case and a sequencer on pool.
func newFeed(t *testing.T, pool *pgxpool.Pool) (*services.CompletionsUseCase, *services.FeedSequencer) {
	t.Helper()
	component, err := txmanager.NewComponentWithDependencies(txmanager.Config{}, pool, txmanager.Dependencies{Logger: log.NewFilter(log.DefaultLogger, log.FilterLevel(log.LevelError))})
	if err != nil {
		t.Fatal(err)
	}
	store := repositories.NewCompletionRepository(pool)
	notify := services.NewFeedNotifier()
	sequencer, err := services.NewFeedSequencer(component.Manager, store, notify, telemetry.Noop())
	if err != nil {
		t.Fatal(err)
	}
	return services.NewCompletionsUseCase(store, notify, services.FeedConfig{MaxWait: 30 * time.Second, PollInterval: 50 * time.Millisecond}), sequencer
}

// A transaction held open anywhere on the cluster (here: another database of the same
// server) does not hold the feed back: a completion is served one sequencer round after
// its commit.
func TestFeedDoesNotWaitForForeignTransactions(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := context.Background()
	foreign := pgtest.NewPool(t, pgtest.NewDatabase(t))
	holder, err := foreign.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if _, err := holder.Exec(ctx, "CREATE TABLE held (id int); INSERT INTO held VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	id := uuid.New()
	if _, err := pool.Exec(ctx, `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, fencing_token)
		VALUES (1337, $1, 'feed-signer', '\x00', 1, '{"value":"0"}', 'CONFIRMED', 1)`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO tx_completions (chain_id, tx_id, signer, status) VALUES (1337, $1, 'feed-signer', 'CONFIRMED')", id); err != nil {
		t.Fatal(err)
	}
	feed, sequencer := newFeed(t, pool)
	if n, _, err := sequencer.Round(ctx); err != nil || n != 1 {
		t.Fatalf("sequencer round with a foreign transaction open: %d positioned, %v", n, err)
	}
	page, err := feed.List(ctx, "", 10, nil, 0, 0)
	if err != nil || len(page.Completions) != 1 || page.Completions[0].TxID != id {
		t.Fatalf("feed with a foreign transaction open: %+v, %v", page, err)
	}
}

// A long-poll answers as soon as a completion is positioned, and a cursor older than what
// retention deleted is refused instead of silently skipping.
func TestFeedLongPollAndExpiredCursor(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := context.Background()
	feed, sequencer := newFeed(t, pool)
	answered := make(chan time.Time, 1)
	go func() {
		page, err := feed.List(ctx, "", 10, nil, 0, 10*time.Second)
		if err != nil || len(page.Completions) != 1 {
			t.Errorf("long-poll: %+v, %v", page, err)
		}
		answered <- time.Now()
	}()
	time.Sleep(300 * time.Millisecond)
	id := uuid.New()
	if _, err := pool.Exec(ctx, `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, fencing_token)
		VALUES (1337, $1, 'feed-signer', '\x00', 1, '{"value":"0"}', 'CONFIRMED', 1)`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO tx_completions (chain_id, tx_id, signer, status) VALUES (1337, $1, 'feed-signer', 'CONFIRMED')", id); err != nil {
		t.Fatal(err)
	}
	if _, _, err := sequencer.Round(ctx); err != nil {
		t.Fatal(err)
	}
	positioned := time.Now()
	select {
	case at := <-answered:
		if late := at.Sub(positioned); late > 200*time.Millisecond {
			t.Fatalf("long-poll answered %s after the completion was positioned", late)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("long-poll did not answer")
	}

	if _, err := pool.Exec(ctx, "UPDATE feed_sequencer SET pruned_through = 5"); err != nil {
		t.Fatal(err)
	}
	if _, err := feed.List(ctx, "3", 10, nil, 0, 0); !errors.Is(err, services.ErrCursorExpired) {
		t.Fatalf("cursor below what retention deleted: %v, want ErrCursorExpired", err)
	}
	if _, err := feed.List(ctx, "5", 10, nil, 0, 0); err != nil {
		t.Fatalf("cursor at the retention mark: %v", err)
	}
}
