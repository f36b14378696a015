package services_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// feedFixture is the completions feed on a real database: the use case readers call, and
// the sequencer that positions what is written.
type feedFixture struct {
	pool      *pgxpool.Pool
	feed      *services.CompletionsUseCase
	sequencer *services.FeedSequencer
}

func newFeedFixture(t *testing.T) *feedFixture {
	t.Helper()
	pool := testsupport.MigratedPool(t)
	component, err := txmanager.NewComponentWithDependencies(txmanager.Config{}, pool, txmanager.Dependencies{Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	store, notifier := repositories.NewCompletionRepository(pool), services.NewFeedNotifier()
	sequencer, err := services.NewFeedSequencer(component.Manager, store, notifier, telemetry.Noop())
	if err != nil {
		t.Fatal(err)
	}
	return &feedFixture{pool: pool, sequencer: sequencer,
		// A long poll interval: a long-poll that answers early was woken, it did not look.
		feed: services.NewCompletionsUseCase(store, services.NewStandbyWait(repositories.NewStandbyRepository(pool)), notifier, services.FeedConfig{MaxWait: 5 * time.Second, PollInterval: 10 * time.Second})}
}

// complete writes a final transaction of signer with its completion, not positioned yet.
func (f *feedFixture) complete(t *testing.T, signer string, nonce int) uuid.UUID {
	t.Helper()
	id := uuid.New()
	if _, err := f.pool.Exec(context.Background(), `INSERT INTO managed_tx (chain_id, tx_id, signer, intent_hash, nonce, payload, state, fencing_token, confirmed_at)
		VALUES (1337, $1, $2, '\x00', $3, '{"value":"0"}', 'CONFIRMED', 1, now())`, id, signer, nonce); err != nil {
		t.Fatal(err)
	}
	if _, err := f.pool.Exec(context.Background(), "INSERT INTO tx_completions (chain_id, tx_id, signer, status, completed_at) VALUES (1337, $1, $2, 'CONFIRMED', now())",
		id, signer); err != nil {
		t.Fatal(err)
	}
	return id
}

// round positions everything written and reports how many completions it positioned.
func (f *feedFixture) round(t *testing.T) int {
	t.Helper()
	n, _, err := f.sequencer.Round(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The feed is read page by page, each page's cursor resuming after it, of one signer when
// asked; a request outside the bounds is refused before anything is read.
func TestCompletionsFeedPages(t *testing.T) {
	t.Parallel()
	f := newFeedFixture(t)
	a, b := testsupport.SignerAddress(60).Hex(), testsupport.SignerAddress(61).Hex()
	var ids []uuid.UUID
	for i, signer := range []string{a, b, a} {
		ids = append(ids, f.complete(t, signer, i))
	}
	if n := f.round(t); n != 3 {
		t.Fatalf("the round positioned %d completions, want 3", n)
	}
	if n := f.round(t); n != 0 {
		t.Fatalf("a second round positioned %d, want none left", n)
	}
	tests := []struct {
		name    string
		cursor  string
		limit   int
		signers []string
		want    []uuid.UUID
		next    string
		wantErr bool
		// wantExpired: the cursor is refused as expired (the reader starts again).
		wantExpired bool
	}{
		{name: "the first page", limit: 2, want: ids[:2], next: "2"},
		{name: "the next page", cursor: "2", limit: 2, want: ids[2:], next: "3"},
		{name: "past the end", cursor: "3", want: nil, next: "3"},
		{name: "one signer's completions", signers: []string{a}, want: []uuid.UUID{ids[0], ids[2]}, next: "3"},
		// Its cursor moves past the other signer's later completions, up to the head.
		{name: "a signer whose last completion is not the feed's last", signers: []string{b}, want: []uuid.UUID{ids[1]}, next: "3"},
		{name: "a signer with nothing new", cursor: "1", signers: []string{testsupport.SignerAddress(62).Hex()}, want: nil, next: "3"},
		{name: "a full page stops at its last", cursor: "1", limit: 1, signers: []string{b}, want: []uuid.UUID{ids[1]}, next: "2"},
		{name: "a cursor past the head (the feed lost what the reader saw)", cursor: "4", wantExpired: true},
		{name: "a cursor not made by the API", cursor: "abc", wantErr: true},
		{name: "a negative page", limit: -1, wantErr: true},
		{name: "a page beyond the bound", limit: 1001, wantErr: true},
	}
	for _, tc := range tests {
		page, err := f.feed.List(t.Context(), tc.cursor, tc.limit, tc.signers, 0, 0)
		if tc.wantExpired {
			if !errors.Is(err, services.ErrCursorExpired) {
				t.Errorf("%s: %v, want the cursor expired", tc.name, err)
			}
			continue
		}
		if tc.wantErr {
			if !errors.Is(err, domain.ErrInvalidArgument) {
				t.Errorf("%s: %v, want INVALID_ARGUMENT", tc.name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		var got []uuid.UUID
		for _, c := range page.Completions {
			got = append(got, c.TxID)
		}
		if len(got) != len(tc.want) || page.Next != tc.next {
			t.Errorf("%s: %v next %q, want %v next %q", tc.name, got, page.Next, tc.want, tc.next)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
				break
			}
		}
	}
	// A client cannot know the deployment's bound: a longer wait is cut to it, as a read of
	// one transaction's is.
	if page, err := f.feed.List(t.Context(), "", 0, nil, 0, time.Minute); err != nil || len(page.Completions) == 0 {
		t.Errorf("a wait beyond maxWait: %v, %d completions; want the page", err, len(page.Completions))
	}
	if _, err := f.feed.List(t.Context(), "", 0, nil, 0, -time.Second); !errors.Is(err, domain.ErrInvalidArgument) {
		t.Errorf("a negative wait: %v, want INVALID_ARGUMENT", err)
	}
}

// A long-poll with nothing new answers as soon as a completion is positioned (the
// sequencer wakes it, it does not wait for its poll), an empty page once its wait is over
// or a second before the caller's deadline (so the answer reaches the caller in time), and
// an empty page with its cursor when the caller gives up.
func TestCompletionsFeedLongPoll(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// arrives: a completion is written and positioned after this long (0: none).
		arrives time.Duration
		wait    time.Duration
		// callerGivesUp: the caller cancels after this long; callerDeadline: the caller's
		// context has a deadline this far off (0: neither).
		callerGivesUp, callerDeadline time.Duration
		wantItems                     int
		minTook                       time.Duration
		maxTook                       time.Duration
	}{
		{name: "a completion arrives during the wait", arrives: 200 * time.Millisecond, wait: 3 * time.Second, wantItems: 1,
			minTook: 200 * time.Millisecond, maxTook: 2500 * time.Millisecond},
		{name: "nothing arrives", wait: 300 * time.Millisecond, minTook: 300 * time.Millisecond, maxTook: 2 * time.Second},
		{name: "the caller gives up", wait: 3 * time.Second, callerGivesUp: 200 * time.Millisecond, minTook: 200 * time.Millisecond, maxTook: 2500 * time.Millisecond},
		{name: "the caller's deadline comes first", wait: 3 * time.Second, callerDeadline: 1500 * time.Millisecond, minTook: 400 * time.Millisecond,
			maxTook: 1400 * time.Millisecond},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFeedFixture(t)
			f.complete(t, "0xearlier", 0)
			f.round(t)
			if tc.arrives > 0 {
				go func() {
					time.Sleep(tc.arrives)
					f.complete(t, "0xlater", 1)
					_, _, _ = f.sequencer.Round(context.Background())
				}()
			}
			ctx := t.Context()
			if tc.callerGivesUp > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithCancel(ctx)
				defer cancel()
				defer time.AfterFunc(tc.callerGivesUp, cancel).Stop()
			}
			if tc.callerDeadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.callerDeadline)
				defer cancel()
			}
			started := time.Now()
			page, err := f.feed.List(ctx, "1", 10, nil, 0, tc.wait)
			took := time.Since(started)
			if err != nil || len(page.Completions) != tc.wantItems {
				t.Fatalf("%d completions (%v), want %d", len(page.Completions), err, tc.wantItems)
			}
			if tc.wantItems == 0 && page.Next != "1" {
				t.Fatalf("an empty page's cursor %q, want the one asked with", page.Next)
			}
			if took < tc.minTook || took > tc.maxTook {
				t.Fatalf("answered after %s, want between %s and %s", took, tc.minTook, tc.maxTook)
			}
		})
	}
}

// A cursor from before feed positions ("<xid>-<seq>", what a consumer of an older version
// kept) resumes after the completion it named: the feed goes on where it left off.
func TestCompletionsFeedResumesALegacyCursor(t *testing.T) {
	t.Parallel()
	f := newFeedFixture(t)
	first := f.complete(t, "0xsigner", 0)
	second := f.complete(t, "0xsigner", 1)
	f.round(t)
	var xid uint64
	var seq int64
	if err := f.pool.QueryRow(t.Context(), "SELECT xid::text::bigint, seq FROM tx_completions WHERE tx_id = $1", first).Scan(&xid, &seq); err != nil {
		t.Fatal(err)
	}
	page, err := f.feed.List(t.Context(), fmt.Sprintf("%d-%d", xid, seq), 10, nil, 0, 0)
	if err != nil || len(page.Completions) != 1 || page.Completions[0].TxID != second {
		t.Fatalf("after the legacy cursor of the first completion: %+v (%v), want the second alone", page.Completions, err)
	}
}

// prunedWhileRead is the feed's store with retention deleting the feed's first completions
// while a page is read, after the reader's cursor was checked.
type prunedWhileRead struct {
	services.CompletionStore
	pool    *pgxpool.Pool
	through int64
}

func (p *prunedWhileRead) ListAfter(ctx context.Context, pos services.FeedPosition, limit int, signers []string, chainID uint64) ([]services.Completion, error) {
	if _, err := p.pool.Exec(ctx, "DELETE FROM tx_completions WHERE feed_position <= $1", p.through); err != nil {
		return nil, err
	}
	if _, err := p.pool.Exec(ctx, "UPDATE feed_sequencer SET pruned_through = $1", p.through); err != nil {
		return nil, err
	}
	return p.CompletionStore.ListAfter(ctx, pos, limit, signers, chainID)
}

// Retention that deletes past a reader's cursor while its page is read makes the cursor
// expire, as it would have a moment before: the page would start after a hole.
func TestCompletionsFeedPrunedDuringARead(t *testing.T) {
	t.Parallel()
	f := newFeedFixture(t)
	for i := range 5 {
		f.complete(t, testsupport.SignerAddress(63).Hex(), i)
	}
	if n := f.round(t); n != 5 {
		t.Fatalf("the round positioned %d completions, want 5", n)
	}
	store := &prunedWhileRead{CompletionStore: repositories.NewCompletionRepository(f.pool), pool: f.pool, through: 3}
	feed := services.NewCompletionsUseCase(store, services.NewStandbyWait(repositories.NewStandbyRepository(f.pool)), services.NewFeedNotifier(),
		services.FeedConfig{MaxWait: 5 * time.Second, PollInterval: 10 * time.Second})
	page, err := feed.List(t.Context(), "1", 0, nil, 0, 0)
	if !errors.Is(err, services.ErrCursorExpired) {
		t.Fatalf("cursor 1 with retention deleting through 3 during the read: %d completions, next %q, %v; want the cursor expired", len(page.Completions), page.Next, err)
	}
}
