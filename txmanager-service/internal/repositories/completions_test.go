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
	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
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
	if _, err := pool.Exec(ctx, `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, fencing_token, confirmed_at)
		SELECT 1337, id, 'feed-signer', '\x00', ordinality, '{"value":"0"}', 'CONFIRMED', 1, now() FROM unnest($1::uuid[]) WITH ORDINALITY AS t(id, ordinality)`, ids); err != nil {
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
	feed, sequencer := newFeed(t, pool, feedPoll)
	defer runSequencers(t, sequencer, 3)()
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

// feedPoll is how often the tests' long-polls look for positions by themselves.
const feedPoll = 50 * time.Millisecond

// newFeed builds the feed use case, its long-polls polling every poll, and a sequencer on
// pool.
func newFeed(t *testing.T, pool *pgxpool.Pool, poll time.Duration) (*services.CompletionsUseCase, *services.FeedSequencer) {
	t.Helper()
	store := repositories.NewCompletionRepository(pool)
	notify := services.NewFeedNotifier()
	sequencer, err := services.NewFeedSequencer(newTestManager(t, pool), store, notify, telemetry.Noop())
	if err != nil {
		t.Fatal(err)
	}
	return services.NewCompletionsUseCase(store, services.NewStandbyWait(repositories.NewStandbyRepository(pool)), notify, services.FeedConfig{MaxWait: 30 * time.Second, PollInterval: poll}), sequencer
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
	if _, err := pool.Exec(ctx, `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, fencing_token, confirmed_at)
		VALUES (1337, $1, 'feed-signer', '\x00', 1, '{"value":"0"}', 'CONFIRMED', 1, now())`, id); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO tx_completions (chain_id, tx_id, signer, status) VALUES (1337, $1, 'feed-signer', 'CONFIRMED')", id); err != nil {
		t.Fatal(err)
	}
	feed, sequencer := newFeed(t, pool, feedPoll)
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
	feed, sequencer := newFeed(t, pool, feedPoll)
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
	if _, err := pool.Exec(ctx, `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, fencing_token, confirmed_at)
		VALUES (1337, $1, 'feed-signer', '\x00', 1, '{"value":"0"}', 'CONFIRMED', 1, now())`, id); err != nil {
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

	// Retention deletes only what the feed gave out: the head is at least the mark.
	if _, err := pool.Exec(ctx, "UPDATE feed_sequencer SET pruned_through = 5, last_position = GREATEST(last_position, 5)"); err != nil {
		t.Fatal(err)
	}
	if _, err := feed.List(ctx, "3", 10, nil, 0, 0); !errors.Is(err, services.ErrCursorExpired) {
		t.Fatalf("cursor below what retention deleted: %v, want ErrCursorExpired", err)
	}
	if _, err := feed.List(ctx, "5", 10, nil, 0, 0); err != nil {
		t.Fatalf("cursor at the retention mark: %v", err)
	}
}

// Property: finality positions the completions it writes in its own statement, under the
// sequencer's lock, while sequencer rounds position what reconciliation writes without a
// position. With both at once, from several signers, a consumer paging the feed receives
// every completion exactly once in increasing positions; the positions end gapless; and
// no finality completion waited for a round.
func TestFinalityPositionsItsCompletionsInCommitOrder(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := context.Background()
	const signers, perSigner, reconciled = 5, 80, 40
	store := repositories.NewReceiptRepository(pool, testChain())
	block := common.HexToHash("0xb1")
	type signerRows struct {
		lease domain.Lease
		ids   []uuid.UUID
	}
	rows := make([]signerRows, signers)
	for s := range rows {
		rows[s].lease = acquireLease(t, pool, fmt.Sprintf("0x%040x", 0xf0+s), "node-a")
		for n := range perSigner {
			rows[s].ids = append(rows[s].ids, insertMined(t, pool, rows[s].lease, n, block))
		}
	}
	// Final rows whose completions reconciliation writes without a position.
	others := make([]uuid.UUID, reconciled)
	for i := range others {
		others[i] = uuid.New()
	}
	if _, err := pool.Exec(ctx, `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, fencing_token, confirmed_at)
		SELECT 1337, id, 'reconciled-signer', '\x00', ordinality, '{"value":"0"}', 'FAILED_FINAL', 1, now() FROM unnest($1::uuid[]) WITH ORDINALITY AS t(id, ordinality)`, others); err != nil {
		t.Fatal(err)
	}

	var writers sync.WaitGroup
	for s := range rows {
		writers.Go(func() {
			r := rand.New(rand.NewPCG(uint64(s), 11))
			for i := 0; i < perSigner; {
				batch := rows[s].ids[i:min(perSigner, i+1+r.IntN(8))]
				i += len(batch)
				if n, err := store.Finalize(ctx, rows[s].lease, confirmedIn(rows[s].lease, block, batch...)); err != nil || n != len(batch) {
					t.Errorf("finalize signer %d: %d of %d, %v", s, n, len(batch), err)
					return
				}
			}
		})
	}
	writers.Go(func() {
		for _, id := range others {
			if _, err := pool.Exec(ctx, "INSERT INTO tx_completions (chain_id, tx_id, signer, status) VALUES (1337, $1, 'reconciled-signer', 'FAILED_FINAL')", id); err != nil {
				t.Errorf("reconciliation completion: %v", err)
				return
			}
			time.Sleep(time.Millisecond)
		}
	})
	writersDone := make(chan struct{})
	go func() { writers.Wait(); close(writersDone) }()

	feed, sequencer := newFeed(t, pool, feedPoll)
	defer runSequencers(t, sequencer, 2)()

	const total = signers*perSigner + reconciled
	seen := map[uuid.UUID]int{}
	cursor, last := "", services.FeedPosition(0)
	deadline := time.Now().Add(60 * time.Second)
	for len(seen) < total {
		if time.Now().After(deadline) {
			t.Fatalf("consumer saw %d of %d completions before the deadline", len(seen), total)
		}
		page, err := feed.List(ctx, cursor, 7, nil, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range page.Completions {
			if c.Position <= last {
				t.Fatalf("position %d served after %d", c.Position, last)
			}
			last = c.Position
			seen[c.TxID]++
		}
		cursor = page.Next
		if len(page.Completions) == 0 {
			time.Sleep(2 * time.Millisecond)
		}
	}
	<-writersDone
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("completion %s delivered %d times", id, n)
		}
	}

	var count, maxPosition, unpositioned, lastPosition, waitedForRound int64
	if err := pool.QueryRow(ctx, `SELECT count(*), COALESCE(max(feed_position), 0), count(*) FILTER (WHERE feed_position IS NULL),
		(SELECT last_position FROM feed_sequencer WHERE id),
		count(*) FILTER (WHERE signer <> 'reconciled-signer' AND positioned_at <> completed_at)
		FROM tx_completions`).Scan(&count, &maxPosition, &unpositioned, &lastPosition, &waitedForRound); err != nil {
		t.Fatal(err)
	}
	if count != total || maxPosition != total || lastPosition != total || unpositioned != 0 {
		t.Fatalf("%d completions, highest position %d, sequencer at %d, %d unpositioned; want %d, gapless and all positioned",
			count, maxPosition, lastPosition, unpositioned, total)
	}
	if waitedForRound != 0 {
		t.Fatalf("%d finality completions were positioned by a later round, not by their own statement", waitedForRound)
	}
	t.Logf("%d completions (%d from finality) served once each in increasing positions 1..%d", total, signers*perSigner, maxPosition)
}

// A node's long-polls wake when another node's finality positioned completions: the
// sequencer's look sees the feed moved, with no round of its own and no poll.
func TestLongPollWakesForPositionsAssignedElsewhere(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := context.Background()
	// Polling every minute: only a wake can answer within the test's bound.
	feed, sequencer := newFeed(t, pool, time.Minute)
	if _, _, err := sequencer.Round(ctx); err != nil {
		t.Fatal(err)
	}

	lease := acquireLease(t, pool, "0x00000000000000000000000000000000000000e1", "node-b")
	block := common.HexToHash("0xb1")
	id := insertMined(t, pool, lease, 0, block)
	answered := make(chan services.CompletionPage, 1)
	go func() {
		page, err := feed.List(ctx, "", 10, nil, 0, 20*time.Second)
		if err != nil {
			t.Errorf("long-poll: %v", err)
		}
		answered <- page
	}()
	time.Sleep(200 * time.Millisecond)
	if n, err := repositories.NewReceiptRepository(pool, testChain()).Finalize(ctx, lease, confirmedIn(lease, block, id)); err != nil || n != 1 {
		t.Fatalf("finalize on the other node: %d, %v", n, err)
	}
	if n, _, err := sequencer.Round(ctx); err != nil || n != 0 {
		t.Fatalf("round after another node's finality: %d positioned, %v; want 0 (finality positioned its own)", n, err)
	}
	select {
	case page := <-answered:
		if len(page.Completions) != 1 || page.Completions[0].TxID != id || page.Next != "1" {
			t.Fatalf("long-poll answered %+v, want the one completion at position 1", page)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("long-poll not woken by the sequencer's look at the feed")
	}
}

// Finality never makes a transaction final without its completion: with the sequencer's
// row gone (never deleted by the service; here by hand) the completion is written without
// a position instead of being dropped.
func TestFinalityWritesTheCompletionWithoutTheSequencerRow(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := context.Background()
	lease := acquireLease(t, pool, "0x00000000000000000000000000000000000000e2", "node-a")
	block := common.HexToHash("0xb1")
	id := insertMined(t, pool, lease, 0, block)
	if _, err := pool.Exec(ctx, "DELETE FROM feed_sequencer"); err != nil {
		t.Fatal(err)
	}
	if n, err := repositories.NewReceiptRepository(pool, testChain()).Finalize(ctx, lease, confirmedIn(lease, block, id)); err != nil || n != 1 {
		t.Fatalf("finalize: %d, %v", n, err)
	}
	var completions, positioned int
	if err := pool.QueryRow(ctx, "SELECT count(*), count(feed_position) FROM tx_completions WHERE tx_id = $1", id).Scan(&completions, &positioned); err != nil {
		t.Fatal(err)
	}
	if completions != 1 || positioned != 0 {
		t.Fatalf("%d completions, %d positioned; want the one completion, left for a round", completions, positioned)
	}
}

// A cursor from before positions ("<xid>-<seq>") stands for the last position at or
// before it in (xid, seq) order, the order migration 0006 positioned those rows in. The
// look-up reads the table: the (xid, seq) index is gone (migration 0015), since every
// completion wrote an entry into it for a translation each consumer makes once.
func TestLegacyCursorTranslatesWithoutItsIndex(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := t.Context()
	checkIndexes(t, pool, map[string]bool{"tx_completions_xid_seq_idx": false, "tx_completions_position_idx": true})
	const signer = "0x0000000000000000000000000000000000000c0d"
	// Completions as 0006 left them: positions 1..4 in (xid, seq) order.
	legacy := []struct {
		xid, seq, position int64
	}{{100, 1, 1}, {100, 2, 2}, {105, 3, 3}, {107, 9, 4}}
	for i, c := range legacy {
		id := uuid.New()
		if _, err := pool.Exec(ctx, `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, confirmed_at, fencing_token)
			VALUES (1337, $1, $2, '\x00', $3, '{"value":"0"}', 'CONFIRMED', now(), 1)`, id, signer, i); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO tx_completions (seq, xid, chain_id, tx_id, signer, status, feed_position, positioned_at)
			VALUES ($1, $2::bigint::text::xid8, 1337, $3, $4, 'CONFIRMED', $5, now())`, c.seq, c.xid, id, signer, c.position); err != nil {
			t.Fatal(err)
		}
	}
	completions := repositories.NewCompletionRepository(pool)
	tests := []struct {
		name     string
		xid, seq int64
		want     services.FeedPosition
	}{
		{"before every completion", 99, 50, 0},
		{"exactly the first", 100, 1, 1},
		{"between two of one transaction", 100, 2, 2},
		{"a later transaction's lower seq", 105, 1, 2},
		{"between transactions", 106, 0, 3},
		{"after every completion", 200, 0, 4},
	}
	for _, tt := range tests {
		got, err := completions.LegacyPosition(ctx, uint64(tt.xid), tt.seq)
		if err != nil || got != tt.want {
			t.Errorf("%s: cursor %d-%d -> %d, %v; want %d", tt.name, tt.xid, tt.seq, got, err, tt.want)
		}
	}
}
