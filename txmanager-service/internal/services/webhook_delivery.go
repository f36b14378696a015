package services

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// WebhookConfig tunes delivery (webhooks.* in the configuration).
type WebhookConfig struct {
	Enabled bool
	// Lease is how long a node holds a subscription between renewals (every pass).
	Lease time.Duration
	// PassInterval paces claims and renewals.
	PassInterval time.Duration
	// Timeout bounds one delivery.
	Timeout time.Duration
	// BackoffMin and BackoffMax bound the wait after a failed delivery (doubling, jittered).
	BackoffMin, BackoffMax time.Duration
	// DeadAfter: a subscription whose deliveries fail this long becomes dead.
	DeadAfter time.Duration
	// ClaimsPerPass bounds how many free subscriptions one node takes a pass, so that nodes
	// starting together share them out.
	ClaimsPerPass int
	Network       domain.NetworkPolicy
	// Owner is how this process holds a subscription's lease: its node id and incarnation
	// (LeaseOwner), so a process restarted under the same node id while the old one still
	// runs cannot take over the old one's leases as its own renewals.
	Owner string
}

// feedPage is how many completions a deliverer reads at a time. Batches do not span pages,
// so a page holds the largest batch a subscription may ask for.
const feedPage = domain.MaxWebhookBatch

// WebhookDeliverer runs this node's deliveries: it claims subscriptions (leased like a
// signer), and for each it holds reads the completions feed after the subscription's cursor
// and posts the events that pass its filter, in order, one delivery at a time (an event, or
// a batch of them where the subscription asks for batches), until the receiver answers 2xx;
// only then does the cursor move (fenced by the lease token), so delivery is at least once
// and in order, and a node that takes a subscription over resumes from it.
type WebhookDeliverer struct {
	cfg    WebhookConfig
	node   string
	store  SubscriptionStore
	feed   CompletionStore
	events EventStore
	// standby holds a page back until it is on the synchronous standby (StandbyWait).
	standby *StandbyWait
	notify  *FeedNotifier
	client  *http.Client
	metrics *telemetry.Metrics
	log     *log.Helper

	mu      sync.Mutex
	running map[uuid.UUID]*runningDelivery
	wg      sync.WaitGroup
}

type runningDelivery struct {
	token  int64
	cancel context.CancelFunc
	// leaseUntil is the latest moment the lease is surely still held, on this process's
	// monotonic clock: the start of the claim that last took or renewed it, plus the
	// lease. The database counts the lease from its own later now(), so no other node can
	// hold it before then. Nothing is posted after it, and no post runs past it: a node
	// whose claims keep failing, or that slept in a backoff past it, may have been replaced
	// by another that delivered the same events and the ones after, and posting then would
	// deliver out of order.
	leaseUntil atomic.Pointer[time.Time]
	// oldestCompletion and oldestEvent are when the oldest completion, and the oldest
	// service event, not yet delivered happened (Unix nanoseconds; 0: none waits). The lag
	// gauge is the longer wait as of its scrape: a receiver that is down makes it grow.
	oldestCompletion, oldestEvent atomic.Int64
	// failing counts the subscription's streams whose delivery is failing now: the row's
	// one failure record (failing_since, last_error) is cleared by a stream that moves on
	// only while the other does not fail, or a stalled stream would never go dead.
	failing atomic.Int32
}

// lag is how long the oldest event not yet delivered, of either stream, has waited at now.
func (r *runningDelivery) lag(now time.Time) time.Duration {
	var longest time.Duration
	for _, oldest := range []int64{r.oldestCompletion.Load(), r.oldestEvent.Load()} {
		if oldest != 0 {
			longest = max(longest, now.Sub(time.Unix(0, oldest)))
		}
	}
	return longest
}

// NewWebhookDeliverer wires the deliverer; its HTTP client connects only where the network
// policy allows (checked on the address it dials, after resolution) and follows no redirect.
func NewWebhookDeliverer(cfg WebhookConfig, store SubscriptionStore, feed CompletionStore, events EventStore, standby *StandbyWait,
	notify *FeedNotifier, metrics *telemetry.Metrics, logger log.Logger) (*WebhookDeliverer, error) {
	if cfg.Owner == "" {
		return nil, errors.New("webhook deliverer: no lease owner (node id and incarnation)")
	}
	d := &WebhookDeliverer{cfg: cfg, node: cfg.Owner, store: store, feed: feed, events: events, standby: standby, notify: notify, metrics: metrics,
		log: log.NewHelper(log.With(logger, "component", "webhooks")), running: map[uuid.UUID]*runningDelivery{}}
	dialer := &net.Dialer{Timeout: cfg.Timeout, Control: func(_, address string, _ syscall.RawConn) error {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return err
		}
		ip, err := netip.ParseAddr(host)
		if err != nil {
			return err
		}
		return cfg.Network.CheckAddress(ip)
	}}
	d.client = &http.Client{
		Transport: &http.Transport{DialContext: dialer.DialContext, MaxIdleConnsPerHost: 2, IdleConnTimeout: time.Minute, TLSHandshakeTimeout: cfg.Timeout},
		// A redirect could lead anywhere, the forbidden ranges included: it is an answer
		// that is not 2xx, so a failure.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	if metrics != nil {
		err := metrics.RegisterFloatGauge(telemetry.WebhookLagSeconds, "How long the oldest event not yet delivered to each subscription this node delivers has waited, in seconds (0: none waits).",
			func(_ context.Context, record func(float64, ...attribute.KeyValue)) {
				d.mu.Lock()
				defer d.mu.Unlock()
				for id, r := range d.running {
					record(r.lag(time.Now()).Seconds(), attribute.String("subscription", id.String()))
				}
			})
		if err != nil {
			return nil, err
		}
		// From the database, on every node: a subscription that died is delivered by none,
		// so the lag gauge above no longer shows it.
		err = metrics.RegisterGauge(telemetry.WebhookSubscriptionsDead, "Webhook subscriptions that gave up delivering (dead): nothing is sent to them until an operator resumes or replays them.",
			func(ctx context.Context, record func(int64, ...attribute.KeyValue)) {
				ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				defer cancel()
				if n, err := store.CountDead(ctx); err == nil {
					record(n)
				}
			})
		if err != nil {
			return nil, err
		}
	}
	return d, nil
}

// Pass claims and renews this node's subscriptions, starts a delivery for each new one and
// stops those it no longer holds.
func (d *WebhookDeliverer) Pass(ctx context.Context) {
	claimedAt := time.Now()
	claimed, err := d.store.Claim(ctx, d.node, d.cfg.ClaimsPerPass, d.cfg.Lease)
	if err != nil {
		// Also when the pass's own deadline cut it: a claim that keeps timing out is a
		// database too slow to hold the leases, and must show.
		d.log.Warnw("msg", "webhook claim pass failed", "error", err.Error())
		d.stopExpired(time.Now())
		return
	}
	leaseUntil := claimedAt.Add(d.cfg.Lease)
	held := map[uuid.UUID]bool{}
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range claimed {
		held[c.ID] = true
		if r, ok := d.running[c.ID]; ok && r.token == c.Token {
			r.leaseUntil.Store(&leaseUntil)
			continue
		} else if ok {
			r.cancel()
		}
		runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		r := &runningDelivery{token: c.Token, cancel: cancel}
		r.leaseUntil.Store(&leaseUntil)
		d.running[c.ID] = r
		d.wg.Go(func() { d.deliver(runCtx, c, r) })
		d.log.Infow("msg", "delivering webhook subscription", "subscription", c.ID.String(), "fencing_token", c.Token, "cursor", c.Cursor)
	}
	for id, r := range d.running {
		if !held[id] {
			r.cancel()
			delete(d.running, id)
		}
	}
}

// stopExpired ends the deliveries whose lease has run out by now: without a claim that
// renewed it, another node may deliver the subscription already.
func (d *WebhookDeliverer) stopExpired(now time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, r := range d.running {
		if r.expired(now) {
			r.cancel()
			delete(d.running, id)
			d.log.Warnw("msg", "webhook subscription's lease ran out without a renewal; its delivery stops here", "subscription", id.String(), "fencing_token", r.token)
		}
	}
}

// expired: the lease may be held by another node at now.
func (r *runningDelivery) expired(now time.Time) bool {
	return !now.Before(r.until())
}

// withinLease is ctx ended when the lease runs out, following its renewals: a post may
// take longer than one lease (webhooks.timeout above it, a slow receiver), and ended at the
// lease's end as it stood when the post began, it would be cut while the lease is still
// held, counted as the receiver's failure and sent again, and never accepted.
func (r *runningDelivery) withinLease(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	if r.expired(time.Now()) {
		// Ended before the post starts, not by a timer that may fire after it was sent.
		cancel()
		return ctx, cancel
	}
	var (
		mu    sync.Mutex
		ended bool
		timer *time.Timer
	)
	lapse := func() {
		mu.Lock()
		defer mu.Unlock()
		if ended {
			return
		}
		if wait := time.Until(r.until()); wait > 0 {
			timer.Reset(wait) // renewed meanwhile
			return
		}
		cancel()
	}
	mu.Lock()
	timer = time.AfterFunc(time.Until(r.until()), lapse)
	mu.Unlock()
	return ctx, func() {
		mu.Lock()
		ended = true
		timer.Stop()
		mu.Unlock()
		cancel()
	}
}

// until is when the lease may be held by another node.
func (r *runningDelivery) until() time.Time {
	if until := r.leaseUntil.Load(); until != nil {
		return *until
	}
	return time.Time{}
}

// Stop ends every delivery and lets this node's subscriptions go at once.
func (d *WebhookDeliverer) Stop(ctx context.Context) {
	d.mu.Lock()
	for id, r := range d.running {
		r.cancel()
		delete(d.running, id)
	}
	d.mu.Unlock()
	d.wg.Wait()
	if err := d.store.Release(ctx, d.node); err != nil {
		d.log.Warnw("msg", "releasing webhook subscriptions", "error", err.Error())
	}
}

// deliver sends c's two streams, its completions and its service events, each in its own
// order, until the context ends or the lease is lost (which ends both).
func (d *WebhookDeliverer) deliver(ctx context.Context, c ClaimedSubscription, r *runningDelivery) {
	defer func() {
		d.mu.Lock()
		if d.running[c.ID] == r {
			delete(d.running, c.ID)
		}
		d.mu.Unlock()
	}()
	if d.cursorExpired(ctx, c) {
		return
	}
	var streams sync.WaitGroup
	streams.Go(func() { d.send(ctx, c, r, d.completionStream(c, r)) })
	streams.Go(func() { d.send(ctx, c, r, d.eventStream(c, r)) })
	streams.Wait()
}

// deadAtOnce, as Failed's deadAfter, makes the subscription dead with this failure.
const deadAtOnce = -time.Second

// cursorExpired makes c dead, and reports so, when its cursor is below what retention kept
// (a subscription paused or dead for longer than retention.horizon, then resumed): reading
// on from the first completion still kept would skip the deleted ones without a word. An
// operator replays it from a position retention kept, or from the start (stored as the
// last position retention had deleted, so that one retention passes later is found too).
func (d *WebhookDeliverer) cursorExpired(ctx context.Context, c ClaimedSubscription) bool {
	state, err := d.feed.State(ctx)
	if err != nil || c.Cursor >= int64(state.PrunedThrough) {
		return false // a read that fails is retried by the delivery's own reads
	}
	d.expire(ctx, c, c.Cursor, int64(state.PrunedThrough))
	return true
}

// expire makes c dead because retention deleted past its cursor.
func (d *WebhookDeliverer) expire(ctx context.Context, c ClaimedSubscription, cursor, prunedThrough int64) {
	reason := fmt.Sprintf("its cursor %d is below position %d, up to which retention deleted completions: replay it from the start or from a later position",
		cursor, prunedThrough)
	_, held, err := d.store.Failed(ctx, c, d.node, reason, deadAtOnce)
	if err != nil || !held {
		d.lost(c, err)
		return
	}
	d.log.Errorw("msg", "webhook subscription dead: its cursor points into completions retention deleted", "subscription", c.ID.String(),
		"cursor", cursor, "pruned_through", prunedThrough)
}

// prunedPastCursor: retention deleted completions past a delivering subscription's cursor.
type prunedPastCursor struct{ cursor, prunedThrough int64 }

func (e *prunedPastCursor) Error() string {
	return fmt.Sprintf("retention deleted completions through %d, past the cursor %d", e.prunedThrough, e.cursor)
}

// pushed is one event of a stream: where it stands, whether the filter takes it, and what is
// sent.
type pushed struct {
	position int64
	// cursor is the position as the event's body names it.
	cursor string
	match  bool
	id     string
	body   func() []byte
	// at is when a completion became final, or a service event happened: the lag gauge's
	// start.
	at time.Time
}

// stream is one ordered source of a subscription: read pages after a position, move the
// subscription's cursor for it.
type stream struct {
	cursor  int64
	read    func(ctx context.Context, after int64) ([]pushed, error)
	advance func(ctx context.Context, cursor int64, delivered int) (bool, error)
	// changed, when set, wakes a wait for more before the next look.
	changed func() <-chan struct{}
	// oldest is the stream's part of the lag gauge: when its oldest event not yet delivered
	// happened (runningDelivery).
	oldest *atomic.Int64
}

// completionStream is c's completions feed, filtered as the subscription asks.
func (d *WebhookDeliverer) completionStream(c ClaimedSubscription, r *runningDelivery) stream {
	signers := hexes(c.Filter)
	var chain uint64
	if len(c.Filter.Chains) == 1 {
		chain = c.Filter.Chains[0]
	}
	return stream{
		cursor: c.Cursor,
		read: func(ctx context.Context, after int64) ([]pushed, error) {
			// The head before the page: every completion up to it was committed, so a short
			// page holds all of them the filter takes.
			before, err := d.feed.State(ctx)
			if err != nil {
				return nil, err
			}
			page, err := d.feed.ListAfter(ctx, FeedPosition(after), feedPage, signers, chain)
			if err == nil {
				// Retention may delete past the cursor while the subscription delivers (a
				// replay from the oldest kept, a receiver slow at the horizon): reading on
				// would skip the deleted completions without a word.
				if state, stateErr := d.feed.State(ctx); stateErr == nil && FeedPosition(after) < state.PrunedThrough {
					return nil, &prunedPastCursor{cursor: after, prunedThrough: int64(state.PrunedThrough)}
				}
			}
			out := make([]pushed, len(page))
			for i, cpl := range page {
				out[i] = pushed{position: int64(cpl.Position), cursor: cpl.Position.String(),
					match: c.Filter.Matches(domain.EventCompletion, cpl.ChainID, cpl.Signer, string(cpl.Status)),
					id:    "completion:" + cpl.TxID.String(), body: func() []byte { return webhookBody(c.ID, cpl) }, at: cpl.CompletedAt}
			}
			if err == nil && len(page) < feedPage {
				out = throughHead(out, after, int64(before.LastPosition))
			}
			return out, err
		},
		advance: func(ctx context.Context, cursor int64, delivered int) (bool, error) {
			return d.store.Advance(ctx, c, d.node, cursor, delivered, r.failing.Load() == 0)
		},
		changed: d.notify.Changed,
		oldest:  &r.oldestCompletion,
	}
}

// eventStream is c's service events (balances, refills, quarantines, approvals requested).
func (d *WebhookDeliverer) eventStream(c ClaimedSubscription, r *runningDelivery) stream {
	signers := hexes(c.Filter)
	return stream{
		cursor: c.EventCursor,
		read: func(ctx context.Context, after int64) ([]pushed, error) {
			// The head before the page: positions are taken under the sequencer's row lock
			// until commit, so every event up to it is committed and a short page holds all
			// of them the signers take.
			head, err := d.events.Head(ctx)
			if err != nil {
				return nil, err
			}
			page, err := d.events.ListAfter(ctx, after, feedPage, signers)
			out := make([]pushed, len(page))
			for i, e := range page {
				out[i] = pushed{position: e.Position, cursor: "e" + strconv.FormatInt(e.Position, 10), match: c.Filter.Matches(e.Kind, e.ChainID, e.Signer, ""), id: e.ID,
					body: func() []byte { return eventBody(c.ID, e) }, at: e.At}
			}
			if err == nil && len(page) < feedPage {
				out = throughHead(out, after, head)
			}
			return out, err
		},
		advance: func(ctx context.Context, cursor int64, delivered int) (bool, error) {
			return d.store.AdvanceEvents(ctx, c, d.node, cursor, delivered, r.failing.Load() == 0)
		},
		changed: func() <-chan struct{} { return nil },
		oldest:  &r.oldestEvent,
	}
}

// throughHead ends a short page (read after after) at head, the stream's last position
// before the page was read: the positions between the page's last and the head are other
// signers' or chains' (events the filter skips), and the cursor moves past them, or a
// subscription whose signers are quiet would read everything since its last event at every
// look and fall behind retention.
func throughHead(page []pushed, after, head int64) []pushed {
	last := after
	if len(page) > 0 {
		last = page[len(page)-1].position
	}
	if head > last {
		page = append(page, pushed{position: head})
	}
	return page
}

// hexes are the filter's signers as the stores name them (nil: every signer).
func hexes(f domain.SubscriptionFilter) []string {
	var out []string
	for _, s := range f.Signers {
		out = append(out, s.Hex())
	}
	return out
}

// send delivers s's events in order, each delivery (an event, or up to c.BatchSize of them)
// until the receiver accepts it, and moves the cursor every cursorSaveInterval or at the end
// of a page, so a busy subscription costs one write per page, not one per event. A node
// that loses the lease meanwhile has sent events past the saved cursor: the next owner
// sends them again (at least once). It ends the subscription's other stream when it stops.
func (d *WebhookDeliverer) send(ctx context.Context, c ClaimedSubscription, r *runningDelivery, s stream) {
	defer r.cancel()
	cursor, saved, unsaved := s.cursor, s.cursor, 0
	var failureRecorded, readFailureLogged time.Time
	lastSave := time.Now()
	save := func() bool {
		if cursor == saved {
			return true
		}
		// Also when the delivery is being stopped (a pause, a shutdown, a lost claim): what
		// the receiver accepted is not sent again. The lease and token in the statement
		// still refuse a save after another node took the subscription.
		saveCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cursorSaveTimeout)
		defer cancel()
		moved, err := s.advance(saveCtx, cursor, unsaved)
		if err != nil || !moved {
			d.lost(c, err)
			return false
		}
		saved, unsaved, lastSave = cursor, 0, time.Now()
		return true
	}
	var take []pushed // the events of one delivery, its backing array kept from one to the next
	defer save()      // what was delivered before a stop is not delivered again
	for ctx.Err() == nil {
		changed := s.changed()
		page, err := s.read(ctx, cursor)
		if err == nil && len(page) > 0 {
			// Completions and events both take their positions from a sequencer row: a
			// page sent before it is on the standby may hold positions a failover gives
			// to other completions or events.
			err = d.standby.Await(ctx)
		}
		var pruned *prunedPastCursor
		if errors.As(err, &pruned) {
			d.expire(ctx, c, pruned.cursor, pruned.prunedThrough)
			return
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			// Nothing waiting is known to have been delivered: the lag counts from the
			// first failed read, so a subscription stuck here shows in the lag alert, and
			// the failure is logged (once a minute while it lasts).
			if s.oldest.Load() == 0 {
				s.oldest.Store(time.Now().UnixNano())
			}
			if time.Since(readFailureLogged) >= time.Minute {
				readFailureLogged = time.Now()
				d.log.Warnw("msg", "webhook delivery cannot read what to deliver; trying again", "subscription", c.ID.String(), "error", err.Error())
			}
			if !d.sleep(ctx, d.cfg.BackoffMin) {
				return
			}
			continue
		}
		if len(page) == 0 {
			s.oldest.Store(0)
			if !save() {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-changed:
			case <-time.After(time.Second):
			}
			continue
		}
		if !slices.ContainsFunc(page, func(p pushed) bool { return p.match }) {
			// Only events the filter skips: nothing waits for the receiver.
			s.oldest.Store(0)
		}
		for rest := page; len(rest) > 0; {
			// The next delivery: the page's next events up to c.BatchSize that pass the
			// filter, and the ones the filter skips among them.
			take = take[:0]
			n := 0
			for ; n < len(rest) && len(take) < max(c.BatchSize, 1); n++ {
				if rest[n].match {
					take = append(take, rest[n])
				}
			}
			if len(take) > 0 {
				if !take[0].at.IsZero() {
					s.oldest.Store(take[0].at.UnixNano())
				}
				id, body := deliveryOf(c, take)
				if !d.sendUntilAccepted(ctx, c, r, id, body, &failureRecorded) {
					save()
					return
				}
				unsaved += len(take)
			}
			cursor, rest = rest[n-1].position, rest[n:]
			if time.Since(lastSave) >= cursorSaveInterval && !save() {
				return
			}
		}
		if !save() {
			return
		}
	}
}

// cursorSaveInterval bounds how long delivered events go without their cursor saved.
const cursorSaveInterval = 250 * time.Millisecond

// cursorSaveTimeout bounds one save of a cursor, which runs even as its delivery stops.
const cursorSaveTimeout = 2 * time.Second

// deliveryOf is what one delivery of events sends: the event alone where the subscription
// takes one a delivery, else a batch named by its first and last cursors, which is the same
// name for the same events on any node.
func deliveryOf(c ClaimedSubscription, events []pushed) (id string, body []byte) {
	if c.BatchSize <= 1 {
		return events[0].id, events[0].body()
	}
	bodies := make([]json.RawMessage, len(events))
	for i, e := range events {
		bodies[i] = e.body()
	}
	first, last := events[0].cursor, events[len(events)-1].cursor
	// The positions name the batch; a digest of its events' ids tells it from another batch
	// at the same positions (a database restored from a backup gives positions again), which
	// a receiver deduplicating on Idempotency-Key would otherwise drop as seen.
	digest := sha256.New()
	for _, e := range events {
		digest.Write([]byte(e.id))
		digest.Write([]byte{0})
	}
	id = "batch:" + first + "-" + last + ":" + hex.EncodeToString(digest.Sum(nil)[:8])
	body, err := json.Marshal(WebhookBatch{ID: id, Kind: WebhookBatchKind, SubscriptionID: c.ID.String(), Cursor: last, Events: bodies})
	if err != nil {
		panic(fmt.Sprintf("webhook batch marshal: %v", err)) // every body is JSON this package wrote
	}
	return id, body
}

// WebhookBatchKind is the kind of a delivery that carries several events.
const WebhookBatchKind = "batch"

// WebhookBatch is the body of a delivery of several events: each element of Events is the
// body the event would have alone, in feed order; Cursor is the last one's.
type WebhookBatch struct {
	ID             string            `json:"id"`
	Kind           string            `json:"kind"`
	SubscriptionID string            `json:"subscriptionId"`
	Cursor         string            `json:"cursor"`
	Events         []json.RawMessage `json:"events"`
}

// eventBody is the body of a service event's delivery.
func eventBody(subscription uuid.UUID, e ServiceEvent) []byte {
	body, err := json.Marshal(struct {
		ID             string          `json:"id"`
		Kind           string          `json:"kind"`
		SubscriptionID string          `json:"subscriptionId"`
		Cursor         string          `json:"cursor"`
		ChainID        string          `json:"chainId"`
		Signer         string          `json:"signer"`
		At             string          `json:"at"`
		Data           json.RawMessage `json:"data"`
	}{e.ID, e.Kind, subscription.String(), "e" + strconv.FormatInt(e.Position, 10), strconv.FormatUint(e.ChainID, 10), e.Signer.Hex(),
		e.At.UTC().Format(time.RFC3339Nano), e.Payload})
	if err != nil {
		panic(fmt.Sprintf("webhook event marshal: %v", err)) // every field marshals
	}
	return body
}

func (d *WebhookDeliverer) lost(c ClaimedSubscription, err error) {
	if err != nil {
		d.log.Warnw("msg", "webhook cursor not moved; the subscription is delivered again from its cursor", "subscription", c.ID.String(), "error", err.Error())
		return
	}
	d.log.Infow("msg", "webhook subscription lease lost; another node delivers it from its cursor", "subscription", c.ID.String(), "fencing_token", c.Token)
}

// sendUntilAccepted posts one event until the receiver answers 2xx, backing off between
// tries; false when the context ended, the lease was lost or the subscription died.
func (d *WebhookDeliverer) sendUntilAccepted(ctx context.Context, c ClaimedSubscription, r *runningDelivery, eventID string, body []byte, recorded *time.Time) bool {
	wait := d.cfg.BackoffMin
	for attempt := 1; ; attempt++ {
		// No post runs past the lease, nor starts after it (the deadline has passed then): a
		// backoff, or a claim pass that failed, may have outlasted it, and another node may
		// have delivered this event and later ones. The next claim starts again from the
		// saved cursor.
		postCtx, cancelPost := r.withinLease(ctx)
		err := d.post(postCtx, c, eventID, body)
		cancelPost()
		if err == nil {
			d.count(ctx, "delivered", attempt > 1)
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if r.expired(time.Now()) {
			// Not the receiver's failure: the lease's end.
			d.log.Infow("msg", "webhook subscription's lease ran out during a delivery; not sending", "subscription", c.ID.String(), "fencing_token", c.Token)
			return false
		}
		d.count(ctx, "failed", attempt > 1)
		if attempt == 1 {
			r.failing.Add(1)
			defer r.failing.Add(-1)
		}
		// The row learns of failures at most once a second: enough for the dead state and
		// the operators' view, and a flaky receiver does not cost a write per failure.
		if time.Since(*recorded) >= failureRecordEvery {
			*recorded = time.Now()
			state, held, recErr := d.store.Failed(ctx, c, d.node, err.Error(), d.cfg.DeadAfter)
			if recErr != nil || !held {
				d.lost(c, recErr)
				return false
			}
			if state == domain.SubscriptionDead {
				d.log.Errorw("msg", "webhook subscription dead: deliveries failed past webhooks.deadAfter", "subscription", c.ID.String(), "url", domain.RedactURLs(c.URL), "error", err.Error())
				return false
			}
		}
		if attempt == 3 || attempt%20 == 0 {
			d.log.Warnw("msg", "webhook delivery failing; retrying with backoff", "subscription", c.ID.String(), "event", eventID, "attempt", attempt, "error", err.Error())
		}
		if attempt == 1 {
			continue // one failure of a receiver that answered is tried again at once
		}
		// Full jitter: a receiver coming back is not met by every node's retries at once.
		if !d.sleep(ctx, time.Duration(rand.Int64N(int64(wait)))+d.cfg.BackoffMin/2) {
			return false
		}
		wait = min(wait*2, d.cfg.BackoffMax)
	}
}

// failureRecordEvery bounds how often failed deliveries are written to the subscription.
const failureRecordEvery = time.Second

func (d *WebhookDeliverer) count(ctx context.Context, result string, retried bool) {
	if d.metrics == nil {
		return
	}
	d.metrics.WebhookDelivery(ctx, result, retried)
}

// post sends one event, signed; an answer other than 2xx is a failure naming the status.
func (d *WebhookDeliverer) post(ctx context.Context, c ClaimedSubscription, eventID string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL, bytes.NewReader(body))
	if err != nil {
		return domain.WithoutURLs(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "txmanager-webhooks/1")
	req.Header.Set("Txm-Event-Id", eventID)
	req.Header.Set("Idempotency-Key", eventID)
	req.Header.Set("Txm-Subscription-Id", c.ID.String())
	req.Header.Set("Txm-Signature", domain.WebhookSignature(c.Secret, time.Now(), body))
	resp, err := d.client.Do(req)
	if err != nil {
		// Go's client quotes the URL; the error is logged and stored as last_error.
		return fmt.Errorf("post: %w", domain.WithoutURLs(err))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("receiver answered %d", resp.StatusCode)
	}
	return nil
}

func (d *WebhookDeliverer) sleep(ctx context.Context, wait time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(wait):
		return true
	}
}

// WebhookEvent is the body of one delivery.
type WebhookEvent struct {
	ID             string            `json:"id"`
	Kind           string            `json:"kind"`
	SubscriptionID string            `json:"subscriptionId"`
	Cursor         string            `json:"cursor"`
	Completion     WebhookCompletion `json:"completion"`
}

// WebhookCompletion is a completion as the feed's API answers it.
type WebhookCompletion struct {
	TxID        string `json:"txId"`
	ChainID     string `json:"chainId"`
	Signer      string `json:"signer"`
	Nonce       string `json:"nonce"`
	Status      string `json:"status"`
	TxHash      string `json:"txHash"`
	BlockNumber string `json:"blockNumber"`
	CompletedAt string `json:"completedAt"`
	Placeholder bool   `json:"placeholder"`
	RequestID   string `json:"requestId"`
	Recovered   bool   `json:"recovered"`
	Fee         string `json:"fee"`
	Reason      string `json:"reason"`
}

func webhookBody(subscription uuid.UUID, cpl Completion) []byte {
	e := WebhookEvent{ID: "completion:" + cpl.TxID.String(), Kind: domain.EventCompletion, SubscriptionID: subscription.String(), Cursor: cpl.Position.String(),
		Completion: WebhookCompletion{TxID: cpl.TxID.String(), ChainID: strconv.FormatUint(cpl.ChainID, 10), Signer: cpl.Signer.Hex(), Nonce: strconv.FormatUint(cpl.Nonce, 10),
			Status: string(cpl.Status), BlockNumber: strconv.FormatUint(cpl.BlockNumber, 10), CompletedAt: cpl.CompletedAt.UTC().Format(time.RFC3339Nano),
			Placeholder: cpl.Placeholder, RequestID: cpl.RequestID, Recovered: cpl.Recovered, Reason: cpl.Reason}}
	if cpl.TxHash != nil {
		e.Completion.TxHash = cpl.TxHash.Hex()
	}
	if cpl.Fee != nil {
		e.Completion.Fee = cpl.Fee.String()
	}
	body, err := json.Marshal(e)
	if err != nil {
		panic(fmt.Sprintf("webhook event marshal: %v", err)) // every field marshals
	}
	return body
}
