package services_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

func webhookConfig() services.WebhookConfig {
	return services.WebhookConfig{Enabled: true, Lease: time.Second, PassInterval: 100 * time.Millisecond, Timeout: 2 * time.Second,
		BackoffMin: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond, DeadAfter: time.Hour, ClaimsPerPass: 4,
		Network: domain.NetworkPolicy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, AllowHTTP: true}}
}

// addCompletions appends n positioned completions to the feed, as finality writes them.
// withOwner is cfg for the process named owner.
func withOwner(cfg services.WebhookConfig, owner string) services.WebhookConfig {
	cfg.Owner = owner
	return cfg
}

func addCompletions(t *testing.T, pool *pgxpool.Pool, n int) {
	t.Helper()
	_, err := pool.Exec(t.Context(), `WITH head AS (SELECT last_position FROM feed_sequencer WHERE id FOR UPDATE),
		added AS (
			INSERT INTO tx_completions (chain_id, tx_id, signer, status, feed_position, positioned_at)
			SELECT 1337, gen_random_uuid(), '0x06497E1D26D6C5A126E29FFbb240F267C4851c42', 'CONFIRMED', (SELECT last_position FROM head) + g, now()
			FROM generate_series(1, $1::int) g
			RETURNING feed_position)
		UPDATE feed_sequencer SET last_position = (SELECT max(feed_position) FROM added) WHERE id`, n)
	if err != nil {
		t.Fatal(err)
	}
}

// receiver is a webhook endpoint that checks every signature, fails a share of deliveries,
// can be taken down, and records what it accepted.
type receiver struct {
	secret []byte
	mu     sync.Mutex
	rnd    *rand.Rand
	// failShare of deliveries are answered 503; down answers every one 503.
	failShare float64
	down      bool
	accepted  []string        // event ids in the order they were first accepted
	seen      map[string]bool // accepted at least once
	refused   map[string]bool // answered 503 at least once
	// duplicates counts events accepted again; unexplained those never refused before.
	duplicates, unexplained int
	badSignatures           int
	// batches counts deliveries of several events, largest the most events one carried,
	// badBatches the batches whose body did not match their name.
	batches, largest, badBatches int
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if err := domain.VerifyWebhookSignature(rc.secret, r.Header.Get("Txm-Signature"), body, time.Now(), 5*time.Minute); err != nil {
		rc.badSignatures++
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	ids := []string{r.Header.Get("Txm-Event-Id")}
	if strings.HasPrefix(ids[0], "batch:") {
		var batch services.WebhookBatch
		if err := json.Unmarshal(body, &batch); err != nil || batch.ID != ids[0] || batch.Kind != services.WebhookBatchKind || len(batch.Events) == 0 {
			rc.badBatches++
			http.Error(w, "not a batch", http.StatusBadRequest)
			return
		}
		ids = ids[:0]
		for _, raw := range batch.Events {
			var e services.WebhookEvent
			if err := json.Unmarshal(raw, &e); err != nil {
				rc.badBatches++
				http.Error(w, "not an event", http.StatusBadRequest)
				return
			}
			ids = append(ids, e.ID)
		}
		rc.batches++
		rc.largest = max(rc.largest, len(ids))
	}
	if rc.down || rc.rnd.Float64() < rc.failShare {
		for _, id := range ids {
			rc.refused[id] = true
		}
		http.Error(w, "try later", http.StatusServiceUnavailable)
		return
	}
	for _, id := range ids {
		if rc.seen[id] {
			rc.duplicates++
			if !rc.refused[id] {
				rc.unexplained++
			}
		} else {
			rc.seen[id] = true
			rc.accepted = append(rc.accepted, id)
		}
	}
	w.WriteHeader(http.StatusNoContent)
}

// Deliveries to a receiver that fails 30% of them and goes down for a while, with the node
// delivering the subscription stopped midway: every completion arrives, first deliveries in
// feed order, every signature verifies, and an event is sent again only after the receiver
// refused it or, after the takeover, when its cursor was not saved yet (counted). The same
// holds for a subscription that takes batches, whose deliveries never carry more than it
// asked for.
func TestWebhooksDeliverEveryCompletionInOrderThroughFailuresAndATakeover(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// batchSize as the subscription asks (0: unset, one event a delivery).
		batchSize int32
		// wantBatches: deliveries of several events must happen (a backlog forms at the
		// outage), at most batchSize each; otherwise none may.
		wantBatches bool
	}{
		{"one event a delivery", 0, false},
		{"batches of up to 25", 25, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			deliverThroughFailuresAndATakeover(t, tc.batchSize, tc.wantBatches)
		})
	}
}

func deliverThroughFailuresAndATakeover(t *testing.T, batchSize int32, wantBatches bool) {
	pool := testsupport.MigratedPool(t)
	ctx := t.Context()
	cfg := webhookConfig()
	const secret = "whsec_test_0123456789abcdef"
	rc := &receiver{secret: []byte(secret), rnd: rand.New(rand.NewPCG(49, 30)), failShare: 0.3, seen: map[string]bool{}, refused: map[string]bool{}}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)

	store, feed, events := repositories.NewWebhookRepository(pool), repositories.NewCompletionRepository(pool), repositories.NewEventRepository(pool)
	trail := testsupport.AuditTrail(t, pool, "node-a")
	book := services.NewWebhookBook(testsupport.TxManager(t, pool), store, feed, events, trail, cfg, testLogger())
	sub, gotSecret, err := book.Create(ctx, services.SubscriptionInput{URL: srv.URL + "/hooks", Secret: secret, FromStart: true, BatchSize: batchSize}, "ops")
	if err != nil || gotSecret != secret {
		t.Fatalf("subscribe: %v", err)
	}
	addCompletions(t, pool, 100)

	notify := services.NewFeedNotifier()
	start := func(node string) (*services.WebhookDeliverer, context.CancelFunc) {
		d, err := services.NewWebhookDeliverer(withOwner(cfg, node), store, feed, events,
			services.NewStandbyWait(repositories.NewStandbyRepository(pool)), notify, nil, testLogger())
		if err != nil {
			t.Fatal(err)
		}
		loopCtx, cancel := context.WithCancel(ctx)
		looping := make(chan struct{})
		go func() {
			defer close(looping)
			for loopCtx.Err() == nil {
				d.Pass(loopCtx)
				select {
				case <-loopCtx.Done():
				case <-time.After(cfg.PassInterval):
				}
			}
		}()
		// Stopping waits for the loop's pass to end: Stop must not run beside a pass.
		return d, func() { cancel(); <-looping }
	}
	a, stopA := start("node-a")
	waitFor(t, 30*time.Second, "a first share delivered by node-a", func() bool { rc.mu.Lock(); defer rc.mu.Unlock(); return len(rc.accepted) >= 30 })
	// node-a stops renewing (a paused or cut-off process): it goes on delivering until its
	// lease lapses and its next cursor write is fenced; node-b takes over from the cursor.
	stopA()
	t.Cleanup(func() { a.Stop(context.Background()) })
	b, stopB := start("node-b")
	t.Cleanup(func() { stopB(); b.Stop(context.Background()) })
	addCompletions(t, pool, 100)
	rc.mu.Lock()
	rc.down = true
	rc.mu.Unlock()
	time.Sleep(2 * time.Second)
	rc.mu.Lock()
	rc.down = false
	rc.mu.Unlock()
	addCompletions(t, pool, 100)
	waitFor(t, 60*time.Second, "all 300 completions delivered", func() bool { rc.mu.Lock(); defer rc.mu.Unlock(); return len(rc.accepted) == 300 })

	rows, err := pool.Query(ctx, `SELECT 'completion:' || tx_id FROM tx_completions ORDER BY feed_position`)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		want = append(want, id)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if strings.Join(rc.accepted, ",") != strings.Join(want, ",") {
		t.Fatalf("first deliveries are not the feed's order (%d accepted, %d in the feed)", len(rc.accepted), len(want))
	}
	// A repeat of an event the receiver accepted comes only from the takeover: node-a sent
	// events past the cursor it last saved (at most a page, or what a quarter second sends).
	if rc.badSignatures != 0 || rc.unexplained > 100 {
		t.Fatalf("%d bad signatures, %d repeats of accepted events (the takeover explains at most a page, 100)", rc.badSignatures, rc.unexplained)
	}
	if rc.badBatches != 0 || rc.largest > int(max(batchSize, 1)) || (rc.batches > 0) != wantBatches {
		t.Fatalf("batches: %d deliveries of several events, the largest %d (the subscription asked for at most %d), %d malformed; want batches: %v",
			rc.batches, rc.largest, batchSize, rc.badBatches, wantBatches)
	}
	// The cursor and the count are saved once a page or every quarter second: the last
	// save may land after the receiver took the last event.
	var got domain.Subscription
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err = book.Get(ctx, sub.ID.String())
		if err == nil && got.Delivered >= 300 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil || got.Owner != "node-b" || got.Delivered < 300 || got.FailingSince != nil || got.BatchSize != int(max(batchSize, 1)) {
		t.Fatalf("the subscription after delivery: %+v %v", got, err)
	}
	t.Logf("300 completions delivered in order through 30%% failures, a 2 s outage and a takeover: %d refused at least once, %d repeats after a refusal, %d after the takeover; %d batches, the largest %d",
		len(rc.refused), rc.duplicates-rc.unexplained, rc.unexplained, rc.batches, rc.largest)
}

// Subscriptions the network policy or the limits refuse are refused with the field or the
// rule named, and nothing is stored.
func TestHostileSubscriptionsAreRefused(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	cfg := webhookConfig()
	cfg.Network = domain.NetworkPolicy{} // production: public https only
	store := repositories.NewWebhookRepository(pool)
	book := services.NewWebhookBook(testsupport.TxManager(t, pool), store, repositories.NewCompletionRepository(pool), repositories.NewEventRepository(pool),
		testsupport.AuditTrail(t, pool, "n"), cfg, testLogger())
	many := make([]string, 101)
	for i := range many {
		many[i] = "CONFIRMED"
	}
	tests := []struct {
		name string
		in   services.SubscriptionInput
		want string // a field name, or "forbidden" for the network policy
	}{
		{"another scheme", services.SubscriptionInput{URL: "ftp://93.184.215.14/hook"}, "forbidden"},
		{"javascript", services.SubscriptionInput{URL: "javascript:alert(1)"}, "forbidden"},
		{"plain http outside development", services.SubscriptionInput{URL: "http://93.184.215.14/hook"}, "forbidden"},
		{"loopback", services.SubscriptionInput{URL: "https://127.0.0.1:8443/hook"}, "forbidden"},
		{"IPv6 loopback", services.SubscriptionInput{URL: "https://[::1]/hook"}, "forbidden"},
		{"IPv6 loopback with a zone", services.SubscriptionInput{URL: "https://[::1%25lo]:8443/hook"}, "forbidden"},
		{"IPv6 link-local with a zone", services.SubscriptionInput{URL: "https://[fe80::1%25eth0]/hook"}, "forbidden"},
		{"cloud metadata", services.SubscriptionInput{URL: "https://169.254.169.254/latest/meta-data"}, "forbidden"},
		{"a private range", services.SubscriptionInput{URL: "https://10.1.2.3/hook"}, "forbidden"},
		{"an IPv4-mapped private address", services.SubscriptionInput{URL: "https://[::ffff:192.168.1.1]/hook"}, "forbidden"},
		{"a name resolving to loopback", services.SubscriptionInput{URL: "https://localhost/hook"}, "forbidden"},
		{"a private address through NAT64", services.SubscriptionInput{URL: "https://[64:ff9b::a00:5]/hook"}, "forbidden"},
		{"cloud metadata through 6to4", services.SubscriptionInput{URL: "https://[2002:a9fe:a9fe::1]/hook"}, "forbidden"},
		{"a network's own NAT64", services.SubscriptionInput{URL: "https://[64:ff9b:1::5db8:d70e]/hook"}, "forbidden"},
		{"user information", services.SubscriptionInput{URL: "https://user:pw@93.184.215.14/hook"}, "url"},
		{"no host", services.SubscriptionInput{URL: "https:///hook"}, "url"},
		{"an oversized URL", services.SubscriptionInput{URL: "https://93.184.215.14/" + strings.Repeat("a", 3000)}, "url"},
		{"a short secret", services.SubscriptionInput{URL: "https://93.184.215.14/hook", Secret: "short"}, "secret"},
		{"an oversized secret", services.SubscriptionInput{URL: "https://93.184.215.14/hook", Secret: strings.Repeat("s", 300)}, "secret"},
		{"a secret with spaces", services.SubscriptionInput{URL: "https://93.184.215.14/hook", Secret: "a secret with spaces in it"}, "secret"},
		{"an oversized filter", services.SubscriptionInput{URL: "https://93.184.215.14/hook", States: many}, "filter.states"},
		{"a state that is not final", services.SubscriptionInput{URL: "https://93.184.215.14/hook", States: []string{"TRACKING"}}, "filter.states"},
		{"an unknown kind", services.SubscriptionInput{URL: "https://93.184.215.14/hook", Kinds: []string{"everything"}}, "filter.kinds"},
		{"a malformed signer", services.SubscriptionInput{URL: "https://93.184.215.14/hook", Signers: []string{"0x12"}}, "filter.signers[0]"},
		{"chain 0", services.SubscriptionInput{URL: "https://93.184.215.14/hook", Chains: []uint64{0}}, "filter.chains"},
		{"a negative batch", services.SubscriptionInput{URL: "https://93.184.215.14/hook", BatchSize: -1}, "batchSize"},
		{"a batch above a page", services.SubscriptionInput{URL: "https://93.184.215.14/hook", BatchSize: 101}, "batchSize"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := book.Create(t.Context(), tc.in, "ops")
			var v *domain.ValidationError
			switch {
			case tc.want == "forbidden" && errors.Is(err, domain.ErrDestinationForbidden):
			case tc.want != "forbidden" && errors.As(err, &v) && v.Field == tc.want:
			default:
				t.Fatalf("got %v, want %s", err, tc.want)
			}
			t.Logf("%v", err)
		})
	}
	if n, err := store.Count(t.Context()); err != nil || n != 0 {
		t.Fatalf("%d subscriptions stored (%v), want none", n, err)
	}
	// The one a public https URL passes (a literal address: no resolution needed here).
	if _, secret, err := book.Create(t.Context(), services.SubscriptionInput{URL: "https://93.184.215.14/hook"}, "ops"); err != nil || !strings.HasPrefix(secret, "whsec_") {
		t.Fatalf("a public https receiver: %v (generated secret %q)", err, secret)
	}
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A claim answers the token it took, so the node's first cursor write is not fenced; and a
// node whose lease lapsed (cut off from the database, or restarted under the same id) takes
// its subscription back with the next token, the old one fenced.
func TestWebhookClaimsAnswerTheirOwnToken(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := t.Context()
	cfg := webhookConfig()
	store := repositories.NewWebhookRepository(pool)
	book := services.NewWebhookBook(testsupport.TxManager(t, pool), store, repositories.NewCompletionRepository(pool), repositories.NewEventRepository(pool),
		testsupport.AuditTrail(t, pool, "node-a"), cfg, testLogger())
	sub, _, err := book.Create(ctx, services.SubscriptionInput{URL: "http://127.0.0.1:1/hooks", FromStart: true}, "ops")
	if err != nil {
		t.Fatal(err)
	}
	claimOne := func(what string) services.ClaimedSubscription {
		claimed, err := store.Claim(ctx, "node-a", 10, time.Minute)
		if err != nil || len(claimed) != 1 || claimed[0].ID != sub.ID {
			t.Fatalf("%s: %d claimed, %v; want the subscription", what, len(claimed), err)
		}
		return claimed[0]
	}
	first := claimOne("the first claim")
	if ok, err := store.Advance(ctx, first, "node-a", first.Cursor, 0, true); err != nil || !ok {
		t.Fatalf("the first cursor write under the claimed token %d: %v, %v; want it written", first.Token, ok, err)
	}
	if renewed := claimOne("a renewal"); renewed.Token != first.Token {
		t.Fatalf("a renewal answered token %d, want %d", renewed.Token, first.Token)
	}
	if _, err := pool.Exec(ctx, `UPDATE webhook_subscription SET lease_expires_at = now() - interval '1 second' WHERE subscription_id = $1`, sub.ID); err != nil {
		t.Fatal(err)
	}
	again := claimOne("the claim after the lease lapsed")
	if again.Token != first.Token+1 {
		t.Fatalf("taken back with token %d, want %d", again.Token, first.Token+1)
	}
	if ok, err := store.Advance(ctx, first, "node-a", first.Cursor, 0, true); err != nil || ok {
		t.Fatalf("a write under the lapsed token: %v, %v; want it fenced", ok, err)
	}
	if ok, err := store.Advance(ctx, again, "node-a", again.Cursor, 0, true); err != nil || !ok {
		t.Fatalf("a write under the new token: %v, %v; want it written", ok, err)
	}
}

// retentionCase is a webhook book on a database of its own, delivering to a receiver that
// accepts every post: the setting of the retention tests below.
type retentionCase struct {
	pool   *pgxpool.Pool
	cfg    services.WebhookConfig
	rc     *receiver
	url    string
	store  *repositories.WebhookRepository
	feed   *repositories.CompletionRepository
	events *repositories.EventRepository
	book   *services.WebhookBook
}

const retentionSecret = "whsec_test_0123456789abcdef"

func newRetentionCase(t *testing.T) *retentionCase {
	t.Helper()
	pool := testsupport.MigratedPool(t)
	rc := &receiver{secret: []byte(retentionSecret), rnd: rand.New(rand.NewPCG(1, 2)), seen: map[string]bool{}, refused: map[string]bool{}}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	c := &retentionCase{pool: pool, cfg: webhookConfig(), rc: rc, url: srv.URL + "/hooks",
		store: repositories.NewWebhookRepository(pool), feed: repositories.NewCompletionRepository(pool), events: repositories.NewEventRepository(pool)}
	c.book = services.NewWebhookBook(testsupport.TxManager(t, pool), c.store, c.feed, c.events, testsupport.AuditTrail(t, pool, "node-a"), c.cfg, testLogger())
	return c
}

// pruneThrough deletes the completions up to position n, as retention does.
func (c *retentionCase) pruneThrough(t *testing.T, n int) {
	t.Helper()
	if _, err := c.pool.Exec(t.Context(), `WITH gone AS (DELETE FROM tx_completions WHERE feed_position <= $1) UPDATE feed_sequencer SET pruned_through = $1 WHERE id`, n); err != nil {
		t.Fatal(err)
	}
}

func (c *retentionCase) accepted() int {
	c.rc.mu.Lock()
	defer c.rc.mu.Unlock()
	return len(c.rc.accepted)
}

// madeDeadUndelivered runs a delivery pass and waits for the subscription to be dead with
// the retention reason, none of the completions kept past the hole delivered; it answers
// the deliverer, for the passes after a replay.
func (c *retentionCase) madeDeadUndelivered(t *testing.T, id uuid.UUID) *services.WebhookDeliverer {
	t.Helper()
	d := newDeliverer(t, c.pool, c.cfg, c.store, c.feed, c.events)
	d.Pass(t.Context())
	waitFor(t, 10*time.Second, "the subscription dead", func() bool {
		got, err := c.store.Get(t.Context(), id)
		return err == nil && got.State == domain.SubscriptionDead && strings.Contains(got.LastError, "retention")
	})
	if n := c.accepted(); n != 0 {
		t.Fatalf("%d completions delivered past a hole of deleted ones, want none", n)
	}
	return d
}

// deliversAll runs delivery passes until want completions were accepted, and fails when
// another count is reached.
func (c *retentionCase) deliversAll(t *testing.T, d *services.WebhookDeliverer, want int, after string) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); c.accepted() < want && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		d.Pass(t.Context())
	}
	if n := c.accepted(); n != want {
		t.Fatalf("%d delivered after %s, want the %d kept", n, after, want)
	}
}

// A subscription whose cursor points into completions retention deleted (resumed after a
// pause longer than the horizon) is made dead with the reason, not delivered with a hole;
// a replay into the deleted range is refused, and one from the start delivers what is kept.
func TestWebhookCursorBelowRetentionIsNotDeliveredWithAHole(t *testing.T) {
	t.Parallel()
	c := newRetentionCase(t)
	ctx := t.Context()
	addCompletions(t, c.pool, 10)
	sub, _, err := c.book.Create(ctx, services.SubscriptionInput{URL: c.url, Secret: retentionSecret}, "ops") // from position 10
	if err != nil {
		t.Fatal(err)
	}
	addCompletions(t, c.pool, 10)
	// Retention deleted positions up to 15 while the subscription was away.
	c.pruneThrough(t, 15)
	d := c.madeDeadUndelivered(t, sub.ID)

	if _, err := c.book.Replay(ctx, sub.ID.String(), 12, "ops"); !errors.Is(err, services.ErrCursorExpired) {
		t.Fatalf("a replay into the deleted range: %v, want CURSOR_EXPIRED", err)
	}
	if _, err := c.book.Replay(ctx, sub.ID.String(), 0, "ops"); err != nil {
		t.Fatalf("a replay from the start: %v", err)
	}
	// The replay starts the dead subscription again: no resume is needed.
	if got, err := c.store.Get(ctx, sub.ID); err != nil || got.State != domain.SubscriptionActive {
		t.Fatalf("after the replay: %s, %v; want active", got.State, err)
	}
	c.deliversAll(t, d, 5, "a replay from the start (the 5 kept after the subscription's position)")
	// A paused subscription replayed stays paused: its operator resumes it.
	if _, err := c.book.SetState(ctx, sub.ID.String(), domain.SubscriptionPaused, "ops"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.book.Replay(ctx, sub.ID.String(), 0, "ops"); err != nil {
		t.Fatal(err)
	}
	if got, err := c.store.Get(ctx, sub.ID); err != nil || got.State != domain.SubscriptionPaused {
		t.Fatalf("a paused subscription replayed: %s, %v; want still paused", got.State, err)
	}
}

// A subscription made on an empty feed, at its head or from its start, has cursor 0 like
// one from the start of any feed. When it stays away past retention it is made dead like
// any other, not delivered on past the deleted completions (which all came after it); a
// replay from the start then stores the last position retention deleted.
func TestASubscriptionFromAnEmptyFeedIsNotDeliveredWithAHole(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		fromStart bool
	}{{"at the head", false}, {"from the start", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := newRetentionCase(t)
			sub, _, err := c.book.Create(t.Context(), services.SubscriptionInput{URL: c.url, Secret: retentionSecret, FromStart: tc.fromStart}, "ops")
			if err != nil {
				t.Fatal(err)
			}
			if sub.Cursor != 0 {
				t.Fatalf("created on an empty feed with cursor %d, want 0", sub.Cursor)
			}
			addCompletions(t, c.pool, 10)
			c.pruneThrough(t, 5)
			d := c.madeDeadUndelivered(t, sub.ID)
			replayed, err := c.book.Replay(t.Context(), sub.ID.String(), 0, "ops")
			if err != nil || replayed.Cursor != 5 {
				t.Fatalf("a replay from the start: cursor %d, %v; want 5, the last position deleted", replayed.Cursor, err)
			}
			c.deliversAll(t, d, 5, "a replay from the start")
		})
	}
}

// unreadableFeed is the completions feed whose pages cannot be read.
type unreadableFeed struct {
	*repositories.CompletionRepository
}

func (unreadableFeed) ListAfter(context.Context, services.FeedPosition, int, []string, uint64) ([]services.Completion, error) {
	return nil, errors.New("canceling statement due to statement timeout")
}

// refusingEvents is a receiver that takes completions and refuses every service event.
type refusingEvents struct{ completions atomic.Int64 }

func (rc *refusingEvents) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.Header.Get("Txm-Event-Id"), "completion:") {
		rc.completions.Add(1)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	http.Error(w, "not this kind", http.StatusBadRequest)
}

// A subscription's two streams share its failure record: completions delivered on do not
// clear the failure of service events refused meanwhile, so the subscription goes dead
// after webhooks.deadAfter and shows why, instead of retrying them unseen for ever.
func TestAFailingStreamIsNotHiddenByTheOther(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := t.Context()
	cfg := webhookConfig()
	cfg.DeadAfter = 2 * time.Second
	rc := &refusingEvents{}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	store, feed, events := repositories.NewWebhookRepository(pool), repositories.NewCompletionRepository(pool), repositories.NewEventRepository(pool)
	txm := testsupport.TxManager(t, pool)
	book := services.NewWebhookBook(txm, store, feed, events, testsupport.AuditTrail(t, pool, "node-a"), cfg, testLogger())
	sub, _, err := book.Create(ctx, services.SubscriptionInput{URL: srv.URL + "/hooks", FromStart: true}, "ops")
	if err != nil {
		t.Fatal(err)
	}
	event := services.SignerEvent(domain.EventSigningFailing, 1337, testsupport.SignerAddress(7), map[string]any{"why": "test"})
	if err := txm.WithinTx(ctx, txmanager.DefaultOptions(), func(ctx context.Context, sess txmanager.Session) error { return events.Append(ctx, sess, event) }); err != nil {
		t.Fatal(err)
	}
	d := newDeliverer(t, pool, cfg, store, feed, events)
	var got domain.Subscription
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		addCompletions(t, pool, 1)
		d.Pass(ctx)
		if got, err = store.Get(ctx, sub.ID); err == nil && got.State == domain.SubscriptionDead {
			break
		}
	}
	if got.State != domain.SubscriptionDead || !strings.Contains(got.LastError, "400") {
		t.Fatalf("subscription %s (%q) after %d completions delivered, want dead with the events' refusal", got.State, got.LastError, rc.completions.Load())
	}
	if rc.completions.Load() == 0 {
		t.Fatal("no completion delivered: this case tests nothing")
	}
}

// newDeliverer is node-a's deliverer on pool, stopped when the test ends.
func newDeliverer(t *testing.T, pool *pgxpool.Pool, cfg services.WebhookConfig, store *repositories.WebhookRepository,
	feed *repositories.CompletionRepository, events *repositories.EventRepository) *services.WebhookDeliverer {
	t.Helper()
	return newDelivererOf(t, "node-a", pool, cfg, store, feed, events)
}

// newDelivererOf is a deliverer of the process that holds leases as owner.
func newDelivererOf(t *testing.T, owner string, pool *pgxpool.Pool, cfg services.WebhookConfig, store *repositories.WebhookRepository,
	feed *repositories.CompletionRepository, events *repositories.EventRepository) *services.WebhookDeliverer {
	t.Helper()
	d, err := services.NewWebhookDeliverer(withOwner(cfg, owner), store, feed, events,
		services.NewStandbyWait(repositories.NewStandbyRepository(pool)), services.NewFeedNotifier(), nil, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Stop(context.Background()) })
	return d
}

// The lag gauge is how long the oldest event not yet delivered has waited when it is read,
// on either of a subscription's streams: it grows while a receiver is down, and a service
// event the receiver refuses shows while completions are delivered, or a subscription stuck
// on its events would look caught up.
func TestWebhookLagGrowsWhileEventsWait(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		receiver http.Handler
		// delivered is how many of the three completions the receiver takes.
		delivered int64
	}{
		{"the receiver is down", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }), 0},
		{"the receiver refuses service events", &refusingEvents{}, 3},
		// The feed cannot be read (a statement timing out on every try): nothing is sent,
		// and the lag counts from the first failed read.
		{"the feed cannot be read", nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := testsupport.MigratedPool(t)
			ctx := t.Context()
			cfg := webhookConfig()
			var completions atomic.Int64
			receiver := tc.receiver
			if receiver == nil {
				receiver = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
			}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				rec := httptest.NewRecorder()
				receiver.ServeHTTP(rec, r)
				if rec.Code < 300 && strings.HasPrefix(r.Header.Get("Txm-Event-Id"), "completion:") {
					completions.Add(1)
				}
				w.WriteHeader(rec.Code)
			}))
			t.Cleanup(srv.Close)
			store, feed, events := repositories.NewWebhookRepository(pool), repositories.NewCompletionRepository(pool), repositories.NewEventRepository(pool)
			txm := testsupport.TxManager(t, pool)
			book := services.NewWebhookBook(txm, store, feed, events, testsupport.AuditTrail(t, pool, "node-a"), cfg, testLogger())
			sub, _, err := book.Create(ctx, services.SubscriptionInput{URL: srv.URL + "/hooks", FromStart: true}, "ops")
			if err != nil {
				t.Fatal(err)
			}
			event := services.SignerEvent(domain.EventSigningFailing, 1337, testsupport.SignerAddress(7), map[string]any{"why": "test"})
			if err := txm.WithinTx(ctx, txmanager.DefaultOptions(), func(ctx context.Context, sess txmanager.Session) error { return events.Append(ctx, sess, event) }); err != nil {
				t.Fatal(err)
			}
			addCompletions(t, pool, 3)
			metrics, reader := testsupport.RecordedMetrics(t)
			var source services.CompletionStore = feed
			if tc.receiver == nil {
				source = unreadableFeed{feed}
			}
			d, err := services.NewWebhookDeliverer(withOwner(cfg, "node-a"), store, source, events,
				services.NewStandbyWait(repositories.NewStandbyRepository(pool)), services.NewFeedNotifier(), metrics, testLogger())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Stop(context.Background()) })
			lag := func() float64 {
				var rm metricdata.ResourceMetrics
				if err := reader.Collect(ctx, &rm); err != nil {
					t.Fatal(err)
				}
				for _, sm := range rm.ScopeMetrics {
					for _, m := range sm.Metrics {
						if g, ok := m.Data.(metricdata.Gauge[float64]); ok && m.Name == telemetry.WebhookLagSeconds {
							for _, p := range g.DataPoints {
								if v, _ := p.Attributes.Value("subscription"); v.AsString() == sub.ID.String() {
									return p.Value
								}
							}
						}
					}
				}
				return -1
			}
			var got float64
			for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
				d.Pass(ctx)
				if got = lag(); got >= 1.5 && completions.Load() == tc.delivered {
					break
				}
			}
			if got < 1.5 {
				t.Fatalf("webhook lag %v s with events waiting for over 1.5 s, want at least 1.5", got)
			}
			if n := completions.Load(); n != tc.delivered {
				t.Fatalf("%d completions delivered, want %d", n, tc.delivered)
			}
		})
	}
}

// A receiver's URL may hold its secret in the path or the query (chat services' incoming
// hooks): the log, the audit trail and the subscription's last error tell it by scheme and
// host. A receiver that refuses connections makes Go's client quote the URL.
func TestWebhookURLSecretsStayOutOfLogsAndErrors(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := t.Context()
	cfg := webhookConfig()
	cfg.DeadAfter = time.Second
	logs := &testsupport.LogBuffer{}
	logger := log.NewStdLogger(logs)
	store, feed, events := repositories.NewWebhookRepository(pool), repositories.NewCompletionRepository(pool), repositories.NewEventRepository(pool)
	txm := testsupport.TxManager(t, pool)
	book := services.NewWebhookBook(txm, store, feed, events, testsupport.AuditTrail(t, pool, "node-a"), cfg, logger)
	url := "http://" + testsupport.RefusingAddr(t) + "/services/T000/B000/HOOKSECRET?token=TOKSECRET"
	sub, _, err := book.Create(ctx, services.SubscriptionInput{URL: url, FromStart: true}, "ops")
	if err != nil {
		t.Fatal(err)
	}
	addCompletions(t, pool, 1)
	d, err := services.NewWebhookDeliverer(withOwner(cfg, "node-a"), store, feed, events,
		services.NewStandbyWait(repositories.NewStandbyRepository(pool)), services.NewFeedNotifier(), nil, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Stop(context.Background()) })
	var got domain.Subscription
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		d.Pass(ctx)
		if got, err = store.Get(ctx, sub.ID); err == nil && got.State == domain.SubscriptionDead {
			break
		}
	}
	if got.State != domain.SubscriptionDead || !strings.Contains(got.LastError, "connection refused") {
		t.Fatalf("subscription %s (%q), want dead with the refused connection", got.State, got.LastError)
	}
	var audit string
	if err := pool.QueryRow(ctx, "SELECT string_agg(after, ' ') FROM audit_record").Scan(&audit); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "webhook subscription dead") {
		t.Fatal("the subscription's death was not logged: this case tests less than it says")
	}
	for where, text := range map[string]string{"last error": got.LastError, "log": logs.String(), "audit": audit} {
		for _, secret := range []string{"HOOKSECRET", "TOKSECRET"} {
			if strings.Contains(text, secret) {
				t.Errorf("the %s tells %s: %q", where, secret, text)
			}
		}
	}
}

// Retention that deletes past a subscription's cursor while it delivers (here: while its
// receiver holds the first completion of a page) makes it dead with the reason, instead of
// reading on after the hole.
func TestWebhookRetentionPastADeliveringCursor(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := t.Context()
	cfg := webhookConfig()
	// The first delivery is held while the test changes the feed, with no pass renewing
	// the lease: a lease that outlasts it, so the post is not cut at the lease's end.
	cfg.Lease = 30 * time.Second
	held, release := make(chan struct{}, 1), make(chan struct{})
	var delivered atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if delivered.Add(1) == 1 {
			held <- struct{}{}
			<-release
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	store, feed, events := repositories.NewWebhookRepository(pool), repositories.NewCompletionRepository(pool), repositories.NewEventRepository(pool)
	book := services.NewWebhookBook(testsupport.TxManager(t, pool), store, feed, events, testsupport.AuditTrail(t, pool, "node-a"), cfg, testLogger())
	addCompletions(t, pool, 2)
	sub, _, err := book.Create(ctx, services.SubscriptionInput{URL: srv.URL + "/hooks", FromStart: true}, "ops")
	if err != nil {
		t.Fatal(err)
	}
	d := newDeliverer(t, pool, cfg, store, feed, events)
	d.Pass(ctx)
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("the first completion was not delivered")
	}
	// Positions 3 to 10 arrive after the delivery read its page (1 and 2), and retention
	// deletes through 5 before it reads again.
	addCompletions(t, pool, 8)
	if _, err := pool.Exec(ctx, `WITH gone AS (DELETE FROM tx_completions WHERE feed_position <= 5) UPDATE feed_sequencer SET pruned_through = 5 WHERE id`); err != nil {
		t.Fatal(err)
	}
	close(release)
	waitFor(t, 10*time.Second, "the subscription dead", func() bool {
		d.Pass(ctx)
		got, err := store.Get(ctx, sub.ID)
		return err == nil && got.State == domain.SubscriptionDead && strings.Contains(got.LastError, "retention")
	})
	if n := delivered.Load(); n != 2 {
		t.Fatalf("%d completions delivered; want the page read before retention (2), not those after the hole", n)
	}
}

// A subscription filtered to signers that are quiet moves its cursor past the others'
// completions: retention deleting them does not kill it (it missed nothing), and its own
// signer's next completion is delivered.
func TestAFilteredSubscriptionKeepsUpPastOtherSignersCompletions(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := t.Context()
	cfg := webhookConfig()
	const secret = "whsec_test_0123456789abcdef"
	rc := &receiver{secret: []byte(secret), rnd: rand.New(rand.NewPCG(1, 2)), seen: map[string]bool{}, refused: map[string]bool{}}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	store, feed, events := repositories.NewWebhookRepository(pool), repositories.NewCompletionRepository(pool), repositories.NewEventRepository(pool)
	book := services.NewWebhookBook(testsupport.TxManager(t, pool), store, feed, events, testsupport.AuditTrail(t, pool, "node-a"), cfg, testLogger())
	const quiet = "0x1111111111111111111111111111111111111111"
	sub, _, err := book.Create(ctx, services.SubscriptionInput{URL: srv.URL + "/hooks", Secret: secret, Signers: []string{quiet}}, "ops")
	if err != nil {
		t.Fatal(err)
	}
	d := newDeliverer(t, pool, cfg, store, feed, events)
	addCompletions(t, pool, 50) // another signer's
	waitFor(t, 10*time.Second, "the cursor past the other signer's completions", func() bool {
		d.Pass(ctx)
		got, err := store.Get(ctx, sub.ID)
		return err == nil && got.Cursor == 50
	})
	if _, err := pool.Exec(ctx, `WITH gone AS (DELETE FROM tx_completions WHERE feed_position <= 40) UPDATE feed_sequencer SET pruned_through = 40 WHERE id`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `WITH head AS (SELECT last_position FROM feed_sequencer WHERE id FOR UPDATE),
		added AS (INSERT INTO tx_completions (chain_id, tx_id, signer, status, feed_position, positioned_at)
			SELECT 1337, gen_random_uuid(), $1, 'CONFIRMED', last_position + 1, now() FROM head RETURNING feed_position)
		UPDATE feed_sequencer SET last_position = (SELECT feed_position FROM added) WHERE id`, quiet); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the quiet signer's completion delivered", func() bool {
		d.Pass(ctx)
		rc.mu.Lock()
		defer rc.mu.Unlock()
		return len(rc.accepted) == 1
	})
	// The cursor is saved after the delivery is answered (at the deliverer's next save, a
	// quarter second at most), not with it.
	var got domain.Subscription
	waitFor(t, 10*time.Second, "the cursor saved past the delivered completion", func() bool {
		d.Pass(ctx)
		got, err = store.Get(ctx, sub.ID)
		return err == nil && got.Cursor == 51
	})
	if got.State != domain.SubscriptionActive {
		t.Fatalf("the subscription after retention: %+v; want active at cursor 51", got)
	}
}

// A process restarted under the same node id while the old one still runs (paused, cut off)
// holds leases under its own incarnation: it does not renew the old process's subscriptions
// as its own, so the two never deliver one subscription at once, and the old one's release
// when it stops lets go of its own leases only.
func TestARestartedProcessDoesNotDeliverItsPredecessorsSubscriptions(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := t.Context()
	cfg := webhookConfig()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(srv.Close)
	store, feed, events := repositories.NewWebhookRepository(pool), repositories.NewCompletionRepository(pool), repositories.NewEventRepository(pool)
	book := services.NewWebhookBook(testsupport.TxManager(t, pool), store, feed, events, testsupport.AuditTrail(t, pool, "node-a"), cfg, testLogger())
	sub, _, err := book.Create(ctx, services.SubscriptionInput{URL: srv.URL + "/hooks", FromStart: true}, "ops")
	if err != nil {
		t.Fatal(err)
	}
	oldOwner, newOwner := services.LeaseOwner("node-a", "first"), services.LeaseOwner("node-a", "second")
	old := newDelivererOf(t, oldOwner, pool, cfg, store, feed, events)
	restarted := newDelivererOf(t, newOwner, pool, cfg, store, feed, events)
	owner := func() string {
		t.Helper()
		got, err := store.Get(ctx, sub.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.Owner
	}
	steps := []struct {
		name      string
		run       func()
		wantOwner string
	}{
		{"the old process claims it", func() { old.Pass(ctx) }, oldOwner},
		{"the restarted one leaves it while the lease runs", func() { restarted.Pass(ctx) }, oldOwner},
		{"the old one stops and lets it go", func() { old.Stop(context.Background()) }, ""},
		{"the restarted one claims it", func() { restarted.Pass(ctx) }, newOwner},
		{"a late release of the old one's leases keeps it", func() { old.Stop(context.Background()) }, newOwner},
	}
	for _, s := range steps {
		s.run()
		if got := owner(); got != s.wantOwner {
			t.Fatalf("%s: owner %q, want %q", s.name, got, s.wantOwner)
		}
	}
}

// A delivery stopped (a shutdown) saves the cursor of what the receiver accepted: the next
// owner does not send it again.
func TestAStoppedDeliverySavesWhatWasAccepted(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := t.Context()
	cfg := webhookConfig()
	var accepted atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(5 * time.Millisecond)
		if strings.HasPrefix(r.Header.Get("Txm-Event-Id"), "completion:") {
			accepted.Add(1)
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	store, feed, events := repositories.NewWebhookRepository(pool), repositories.NewCompletionRepository(pool), repositories.NewEventRepository(pool)
	book := services.NewWebhookBook(testsupport.TxManager(t, pool), store, feed, events, testsupport.AuditTrail(t, pool, "node-a"), cfg, testLogger())
	sub, _, err := book.Create(ctx, services.SubscriptionInput{URL: srv.URL + "/hooks", FromStart: true}, "ops")
	if err != nil {
		t.Fatal(err)
	}
	addCompletions(t, pool, 200)
	d := newDeliverer(t, pool, cfg, store, feed, events)
	d.Pass(ctx)
	waitFor(t, 10*time.Second, "some completions delivered", func() bool {
		d.Pass(ctx) // renews the lease, as the loop does
		return accepted.Load() >= 20
	})
	d.Stop(context.Background())
	got, err := store.Get(ctx, sub.ID)
	if err != nil {
		t.Fatal(err)
	}
	// The delivery in flight when it stopped may have reached the receiver and not come
	// back: it is sent again (at least once), so the cursor may stand one short.
	if n := accepted.Load(); n == 200 || got.Cursor < n-1 || got.Cursor > n {
		t.Fatalf("stopped after %d of 200 accepted, cursor saved at %d; want the cursor at what was accepted", n, got.Cursor)
	}
}

// Every node reports how many subscriptions are dead, from the database: one that died is
// delivered by no node, so no lag gauge shows it.
func TestDeadSubscriptionsAreCountedOnEveryNode(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := t.Context()
	cfg := webhookConfig()
	store, feed, events := repositories.NewWebhookRepository(pool), repositories.NewCompletionRepository(pool), repositories.NewEventRepository(pool)
	book := services.NewWebhookBook(testsupport.TxManager(t, pool), store, feed, events, testsupport.AuditTrail(t, pool, "node-a"), cfg, testLogger())
	for range 2 {
		if _, _, err := book.Create(ctx, services.SubscriptionInput{URL: "https://93.184.215.14/hook"}, "ops"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE webhook_subscription SET state = 'dead' WHERE subscription_id = (SELECT subscription_id FROM webhook_subscription ORDER BY created_at LIMIT 1)`); err != nil {
		t.Fatal(err)
	}
	metrics, reader := testsupport.RecordedMetrics(t)
	// A node that delivers nothing (it claims no subscription here) reports it too.
	if _, err := services.NewWebhookDeliverer(withOwner(cfg, "node-b"), store, feed, events,
		services.NewStandbyWait(repositories.NewStandbyRepository(pool)), services.NewFeedNotifier(), metrics, testLogger()); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	dead := int64(-1)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if g, ok := m.Data.(metricdata.Gauge[int64]); ok && m.Name == telemetry.WebhookSubscriptionsDead && len(g.DataPoints) == 1 {
				dead = g.DataPoints[0].Value
			}
		}
	}
	if dead != 1 {
		t.Fatalf("%s = %d, want the 1 dead subscription of 2", telemetry.WebhookSubscriptionsDead, dead)
	}
}

// A node whose lease on a subscription ran out without a renewal (its claim passes failing,
// or a backoff that outlasted the lease) posts nothing more: another node may have taken the
// subscription over and delivered these events and later ones, and a late post would reach
// the receiver out of order.
func TestNothingIsPostedAfterTheLeaseRunsOut(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := t.Context()
	cfg := webhookConfig()
	// Backoffs (with their jitter: 1.5 to 4.5 s) that outlast the lease, so the delivery
	// sleeps through its end.
	cfg.BackoffMin, cfg.BackoffMax = 3*cfg.Lease, 3*cfg.Lease
	var mu sync.Mutex
	var posts []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		posts = append(posts, time.Now())
		mu.Unlock()
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	store, feed, events := repositories.NewWebhookRepository(pool), repositories.NewCompletionRepository(pool), repositories.NewEventRepository(pool)
	book := services.NewWebhookBook(testsupport.TxManager(t, pool), store, feed, events, testsupport.AuditTrail(t, pool, "node-a"), cfg, testLogger())
	if _, _, err := book.Create(ctx, services.SubscriptionInput{URL: srv.URL + "/hooks", FromStart: true}, "ops"); err != nil {
		t.Fatal(err)
	}
	addCompletions(t, pool, 5)
	d := newDeliverer(t, pool, cfg, store, feed, events)
	t.Cleanup(func() { d.Stop(context.Background()) })
	claimed := time.Now()
	d.Pass(ctx) // and no pass after it: the lease is not renewed
	time.Sleep(5 * cfg.Lease)
	mu.Lock()
	defer mu.Unlock()
	if len(posts) == 0 {
		t.Fatal("nothing was posted while the lease held")
	}
	// A post begun just before the lease's end may arrive a little after it.
	end := claimed.Add(cfg.Lease + 200*time.Millisecond)
	for _, at := range posts {
		if at.After(end) {
			t.Errorf("posted %s after the claim, with a lease of %s that no pass renewed", at.Sub(claimed).Round(time.Millisecond), cfg.Lease)
		}
	}
}

// A receiver that takes longer than one lease to answer, within webhooks.timeout, has its
// answer heard while the lease is renewed: the post follows the lease's renewals. Before,
// it was cut at the lease's end as it stood when the post began, counted as the receiver's
// failure and sent again, and the event was never accepted.
func TestAPostLongerThanTheLeaseIsHeardWhileTheLeaseIsRenewed(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := t.Context()
	cfg := webhookConfig()
	cfg.Timeout = 4 * cfg.Lease
	answerAfter := 2 * cfg.Lease
	var posts, answered atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		select {
		case <-time.After(answerAfter):
			answered.Add(1)
			w.WriteHeader(http.StatusNoContent)
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	store, feed, events := repositories.NewWebhookRepository(pool), repositories.NewCompletionRepository(pool), repositories.NewEventRepository(pool)
	book := services.NewWebhookBook(testsupport.TxManager(t, pool), store, feed, events, testsupport.AuditTrail(t, pool, "node-a"), cfg, testLogger())
	sub, _, err := book.Create(ctx, services.SubscriptionInput{URL: srv.URL + "/hooks", FromStart: true}, "ops")
	if err != nil {
		t.Fatal(err)
	}
	addCompletions(t, pool, 1)
	d := newDeliverer(t, pool, cfg, store, feed, events)
	waitFor(t, 4*answerAfter, "the completion's delivery accepted and saved", func() bool {
		d.Pass(ctx) // renews the lease, as the loop does
		time.Sleep(cfg.PassInterval)
		got, err := store.Get(ctx, sub.ID)
		return err == nil && got.Cursor == 1
	})
	if n := posts.Load(); n != 1 || answered.Load() != 1 {
		t.Fatalf("%d posts, %d answered, for one event a receiver answers in %s (lease %s, timeout %s); want one post, answered", n, answered.Load(), answerAfter, cfg.Lease, cfg.Timeout)
	}
}

// A subscription to signers whose events are rare moves its event cursor past the other
// signers' service events, as it does past their completions: otherwise every look would
// read all the events since its signers' last one.
func TestAFilteredSubscriptionKeepsUpPastOtherSignersEvents(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := t.Context()
	cfg := webhookConfig()
	var posted atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		posted.Add(1)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	store, feed, events := repositories.NewWebhookRepository(pool), repositories.NewCompletionRepository(pool), repositories.NewEventRepository(pool)
	txm := testsupport.TxManager(t, pool)
	book := services.NewWebhookBook(txm, store, feed, events, testsupport.AuditTrail(t, pool, "node-a"), cfg, testLogger())
	sub, _, err := book.Create(ctx, services.SubscriptionInput{URL: srv.URL + "/hooks", Signers: []string{testsupport.SignerAddress(1).Hex()}}, "ops")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		event := services.SignerEvent(domain.EventSigningFailing, 1337, testsupport.SignerAddress(2), map[string]any{"attempt": i})
		if err := txm.WithinTx(ctx, txmanager.DefaultOptions(), func(ctx context.Context, sess txmanager.Session) error { return events.Append(ctx, sess, event) }); err != nil {
			t.Fatal(err)
		}
	}
	head, err := events.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	d := newDeliverer(t, pool, cfg, store, feed, events)
	t.Cleanup(func() { d.Stop(context.Background()) })
	waitFor(t, 10*time.Second, "the event cursor past the other signer's events", func() bool {
		d.Pass(ctx)
		var cursor int64
		err := pool.QueryRow(ctx, `SELECT event_cursor FROM webhook_subscription WHERE subscription_id = $1`, sub.ID).Scan(&cursor)
		return err == nil && cursor == head
	})
	if n := posted.Load(); n != 0 {
		t.Fatalf("%d deliveries of other signers' events", n)
	}
}

// deletedAfterRead is the subscriptions' store with a subscription deleted just after it is
// read, as by an operator's delete racing a replay.
type deletedAfterRead struct {
	*repositories.WebhookRepository
	pool *pgxpool.Pool
}

func (s deletedAfterRead) Get(ctx context.Context, id uuid.UUID) (domain.Subscription, error) {
	sub, err := s.WebhookRepository.Get(ctx, id)
	if err == nil {
		_, err = s.pool.Exec(ctx, `DELETE FROM webhook_subscription WHERE subscription_id = $1`, id)
	}
	return sub, err
}

// A replay of a subscription deleted between its read and the replay is answered not found
// and leaves no record of a replay in the audit trail.
func TestAReplayOfADeletedSubscriptionLeavesNoAuditRecord(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	ctx := t.Context()
	cfg := webhookConfig()
	store, feed, events := repositories.NewWebhookRepository(pool), repositories.NewCompletionRepository(pool), repositories.NewEventRepository(pool)
	audit := testsupport.AuditTrail(t, pool, "node-a")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(srv.Close)
	sub, _, err := services.NewWebhookBook(testsupport.TxManager(t, pool), store, feed, events, audit, cfg, testLogger()).
		Create(ctx, services.SubscriptionInput{URL: srv.URL + "/hooks"}, "ops")
	if err != nil {
		t.Fatal(err)
	}
	racing := services.NewWebhookBook(testsupport.TxManager(t, pool), deletedAfterRead{store, pool}, feed, events, audit, cfg, testLogger())
	var notFound *domain.NotFoundError
	if _, err := racing.Replay(ctx, sub.ID.String(), 0, "ops"); !errors.As(err, &notFound) {
		t.Fatalf("replay of a subscription deleted meanwhile: %v, want not found", err)
	}
	var replays int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM audit_record WHERE action = $1`, domain.AuditWebhookReplay).Scan(&replays); err != nil {
		t.Fatal(err)
	}
	if replays != 0 {
		t.Fatalf("%d replays in the audit trail, want none", replays)
	}
}
