package services

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/go-kratos/kratos/v2/log"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// SubscriptionStore keeps the webhook subscriptions and their leases (migration 0022).
type SubscriptionStore interface {
	// Insert stores s and answers its cursor as stored: from the start (0) is stored as the
	// last position retention deleted.
	Insert(ctx context.Context, sess txmanager.Session, s domain.Subscription, secret string, eventCursor int64) (int64, error)
	Get(ctx context.Context, id uuid.UUID) (domain.Subscription, error)
	List(ctx context.Context) ([]domain.Subscription, error)
	Count(ctx context.Context) (int64, error)
	// CountDead is how many subscriptions gave up delivering.
	CountDead(ctx context.Context) (int64, error)
	// SetState pauses, resumes or revives one; false when there is no such subscription.
	SetState(ctx context.Context, sess txmanager.Session, id uuid.UUID, state domain.SubscriptionState) (bool, error)
	// Replay moves the cursor (either way) and answers it as stored (from the start, 0, as
	// the last position retention deleted); found is false when there is no such
	// subscription. The node delivering it stops at its next write.
	Replay(ctx context.Context, sess txmanager.Session, id uuid.UUID, cursor int64) (stored int64, found bool, err error)
	Delete(ctx context.Context, sess txmanager.Session, id uuid.UUID) (bool, error)
	// Claim renews this node's leases and takes up to maxNew free ones.
	Claim(ctx context.Context, node string, maxNew int, lease time.Duration) ([]ClaimedSubscription, error)
	// Advance moves the cursor forward under the lease; false when the lease is lost. The
	// failure on record is cleared with clearFailure (not while the other stream fails).
	Advance(ctx context.Context, c ClaimedSubscription, node string, cursor int64, delivered int, clearFailure bool) (bool, error)
	// AdvanceEvents moves the service events' cursor forward under the lease, as Advance.
	AdvanceEvents(ctx context.Context, c ClaimedSubscription, node string, cursor int64, delivered int, clearFailure bool) (bool, error)
	// Failed records a failed delivery; answers the subscription's state after it (dead
	// once failures lasted past deadAfter), and false when the lease is lost.
	Failed(ctx context.Context, c ClaimedSubscription, node, reason string, deadAfter time.Duration) (domain.SubscriptionState, bool, error)
	// Release lets every subscription of node go.
	Release(ctx context.Context, node string) error
}

// ClaimedSubscription is a subscription this node delivers, under the lease token it holds.
type ClaimedSubscription struct {
	ID     uuid.UUID
	URL    string
	Secret []byte
	Filter domain.SubscriptionFilter
	Cursor int64
	// EventCursor is the position of the last service event delivered or skipped.
	EventCursor int64
	Token       int64
	// BatchSize is the most events one delivery carries (1: each event alone, no batch).
	BatchSize int
}

// maxSubscriptions bounds how many subscriptions one deployment keeps: each costs a feed
// reader on some node.
const maxSubscriptions = 100

// SubscriptionInput is what an operator asks for.
type SubscriptionInput struct {
	URL         string
	Secret      string
	Chains      []uint64
	Signers     []string
	States      []string
	Kinds       []string
	Description string
	// FromStart delivers the whole feed still kept; otherwise delivery starts after the
	// feed's head at creation.
	FromStart bool
	// BatchSize is the most events one delivery carries, 1 to 100 (0: 1).
	BatchSize int32
}

// Resolver resolves webhook hosts (net.DefaultResolver in production).
type Resolver interface {
	LookupIP(ctx context.Context, network, host string) ([]net.IP, error)
}

// WebhookBook is the operators' side of webhook subscriptions: created, paused, resumed,
// replayed and deleted at run time, each change in the audit trail.
type WebhookBook struct {
	tx       txmanager.Manager
	store    SubscriptionStore
	feed     CompletionStore
	events   EventStore
	audit    *AuditTrail
	network  domain.NetworkPolicy
	resolver Resolver
	log      *log.Helper
}

// NewWebhookBook wires the book.
func NewWebhookBook(tx txmanager.Manager, store SubscriptionStore, feed CompletionStore, events EventStore, audit *AuditTrail, cfg WebhookConfig, logger log.Logger) *WebhookBook {
	return &WebhookBook{tx: tx, store: store, feed: feed, events: events, audit: audit, network: cfg.Network, resolver: net.DefaultResolver,
		log: log.NewHelper(log.With(logger, "component", "webhooks"))}
}

// Create checks and records a subscription. The secret, generated when empty, is answered
// this once and never again.
func (b *WebhookBook) Create(ctx context.Context, in SubscriptionInput, by string) (domain.Subscription, string, error) {
	u, err := b.network.CheckURL(in.URL)
	if err != nil {
		return domain.Subscription{}, "", err
	}
	if err := b.checkHost(ctx, u.Hostname()); err != nil {
		return domain.Subscription{}, "", err
	}
	secret := in.Secret
	if secret == "" {
		raw := make([]byte, 32)
		_, _ = rand.Read(raw)
		secret = "whsec_" + hex.EncodeToString(raw)
	}
	if err := domain.ParseWebhookSecret(secret); err != nil {
		return domain.Subscription{}, "", err
	}
	filter, err := domain.ParseSubscriptionFilter(in.Chains, in.Signers, in.States, in.Kinds)
	if err != nil {
		return domain.Subscription{}, "", err
	}
	if err := domain.ParseDescription(in.Description); err != nil {
		return domain.Subscription{}, "", err
	}
	batch, err := domain.ParseWebhookBatchSize(in.BatchSize)
	if err != nil {
		return domain.Subscription{}, "", err
	}
	if n, err := b.store.Count(ctx); err != nil {
		return domain.Subscription{}, "", err
	} else if n >= maxSubscriptions {
		return domain.Subscription{}, "", &domain.ValidationError{Field: "url", Reason: fmt.Sprintf("this deployment keeps at most %d subscriptions", maxSubscriptions)}
	}
	s := domain.Subscription{ID: uuid.Must(uuid.NewV7()), URL: u.String(), Filter: filter, State: domain.SubscriptionActive, CreatedBy: by, Description: in.Description, BatchSize: batch}
	var eventCursor int64
	if !in.FromStart {
		state, err := b.feed.State(ctx)
		if err != nil {
			return domain.Subscription{}, "", err
		}
		s.Cursor = int64(state.LastPosition)
		if eventCursor, err = b.events.Head(ctx); err != nil {
			return domain.Subscription{}, "", err
		}
	}
	err = b.tx.WithinTx(ctx, txmanager.DefaultOptions().WithTraceName("webhook.create"), func(ctx context.Context, sess txmanager.Session) error {
		stored, err := b.store.Insert(ctx, sess, s, secret, eventCursor)
		if err != nil {
			return err
		}
		s.Cursor = stored
		return b.audit.Record(ctx, sess, by, domain.AuditWebhookCreated, "webhook "+s.ID.String(), nil,
			map[string]any{"url": domain.RedactURLs(s.URL), "filter": s.Filter, "cursor": s.Cursor, "description": s.Description, "batchSize": s.BatchSize})
	})
	if err != nil {
		return domain.Subscription{}, "", err
	}
	// Receivers take a secret in their path or query (chat services' incoming hooks): the
	// log and the audit trail tell the URL by scheme and host; the API shows it to those
	// allowed to manage webhooks.
	b.log.Infow("msg", "webhook subscription created", "subscription", s.ID.String(), "url", domain.RedactURLs(s.URL), "by", by)
	stored, err := b.store.Get(ctx, s.ID)
	if err != nil {
		// It is created, and its secret is shown only now: answer with what was written
		// rather than an error a caller would retry into a second subscription.
		b.log.Warnw("msg", "webhook subscription created; reading it back failed, answered with what was written", "subscription", s.ID.String(), "error", err.Error())
		return s, secret, nil
	}
	return stored, secret, nil
}

// checkHost refuses a host that resolves (or is) somewhere the network policy forbids.
func (b *WebhookBook) checkHost(ctx context.Context, host string) error {
	if ip, err := netip.ParseAddr(host); err == nil {
		if err := b.network.CheckAddress(ip); err != nil {
			return fmt.Errorf("url: %w", err)
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := b.resolver.LookupIP(ctx, "ip", host)
	if err != nil {
		return &domain.ValidationError{Field: "url", Reason: fmt.Sprintf("host %q does not resolve", host)}
	}
	return b.network.CheckHostAddresses(host, addrs)
}

// Get reads one subscription (never its secret).
func (b *WebhookBook) Get(ctx context.Context, id string) (domain.Subscription, error) {
	parsed, err := parseSubscriptionID(id)
	if err != nil {
		return domain.Subscription{}, err
	}
	return b.store.Get(ctx, parsed)
}

// List reads every subscription.
func (b *WebhookBook) List(ctx context.Context) ([]domain.Subscription, error) {
	return b.store.List(ctx)
}

// SetState pauses, resumes or revives (a dead one) a subscription.
func (b *WebhookBook) SetState(ctx context.Context, id string, state domain.SubscriptionState, by string) (domain.Subscription, error) {
	parsed, err := parseSubscriptionID(id)
	if err != nil {
		return domain.Subscription{}, err
	}
	before, err := b.store.Get(ctx, parsed)
	if err != nil {
		return domain.Subscription{}, err
	}
	err = b.tx.WithinTx(ctx, txmanager.DefaultOptions().WithTraceName("webhook.state"), func(ctx context.Context, sess txmanager.Session) error {
		found, err := b.store.SetState(ctx, sess, parsed, state)
		if err != nil {
			return err
		}
		if !found {
			return &domain.NotFoundError{What: "no webhook subscription " + id}
		}
		return b.audit.Record(ctx, sess, by, domain.AuditWebhookState, "webhook "+id, map[string]any{"state": before.State}, map[string]any{"state": state})
	})
	if err != nil {
		return domain.Subscription{}, err
	}
	return b.store.Get(ctx, parsed)
}

// Replay delivers again everything after cursor (a feed position; 0: the oldest kept).
func (b *WebhookBook) Replay(ctx context.Context, id string, cursor int64, by string) (domain.Subscription, error) {
	parsed, err := parseSubscriptionID(id)
	if err != nil {
		return domain.Subscription{}, err
	}
	if cursor < 0 {
		return domain.Subscription{}, &domain.ValidationError{Field: "cursor", Reason: "a feed position, 0 or more"}
	}
	state, err := b.feed.State(ctx)
	if err != nil {
		return domain.Subscription{}, err
	}
	if cursor > int64(state.LastPosition) {
		return domain.Subscription{}, &domain.ValidationError{Field: "cursor", Reason: fmt.Sprintf("%d is past the feed's head %d", cursor, state.LastPosition)}
	}
	if cursor > 0 && cursor < int64(state.PrunedThrough) {
		return domain.Subscription{}, fmt.Errorf("%w: completions up to position %d were deleted by retention; replay from the start (0) or from %d on",
			ErrCursorExpired, state.PrunedThrough, state.PrunedThrough)
	}
	before, err := b.store.Get(ctx, parsed)
	if err != nil {
		return domain.Subscription{}, err
	}
	err = b.tx.WithinTx(ctx, txmanager.DefaultOptions().WithTraceName("webhook.replay"), func(ctx context.Context, sess txmanager.Session) error {
		stored, found, err := b.store.Replay(ctx, sess, parsed, cursor)
		if err != nil {
			return err
		}
		if !found {
			// Deleted since it was read: nothing was replayed, and the trail says nothing.
			return &domain.NotFoundError{What: "no webhook subscription " + id}
		}
		return b.audit.Record(ctx, sess, by, domain.AuditWebhookReplay, "webhook "+id, map[string]any{"cursor": before.Cursor}, map[string]any{"cursor": stored})
	})
	if err != nil {
		return domain.Subscription{}, err
	}
	return b.store.Get(ctx, parsed)
}

// Delete removes a subscription; nothing more is sent to it once the node delivering it
// next saves its cursor (a quarter second at most).
func (b *WebhookBook) Delete(ctx context.Context, id, by string) error {
	parsed, err := parseSubscriptionID(id)
	if err != nil {
		return err
	}
	return b.tx.WithinTx(ctx, txmanager.DefaultOptions().WithTraceName("webhook.delete"), func(ctx context.Context, sess txmanager.Session) error {
		found, err := b.store.Delete(ctx, sess, parsed)
		if err != nil {
			return err
		}
		if !found {
			return &domain.NotFoundError{What: "no webhook subscription " + id}
		}
		return b.audit.Record(ctx, sess, by, domain.AuditWebhookDeleted, "webhook "+id, nil, nil)
	})
}

func parseSubscriptionID(id string) (uuid.UUID, error) {
	parsed, err := uuid.Parse(id)
	if err != nil {
		return uuid.Nil, &domain.ValidationError{Field: "subscriptionId", Reason: "not a UUID"}
	}
	return parsed, nil
}
