package services

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"
	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"

	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// Completion is one final result in the feed.
type Completion struct {
	ChainID     uint64
	TxID        uuid.UUID
	Signer      common.Address
	Nonce       uint64
	Status      domain.State
	TxHash      *common.Hash
	BlockNumber uint64
	CompletedAt time.Time
	// Placeholder: the service created this transaction to fill a nonce hole.
	Placeholder bool
	// RequestID is the request it executes ("" for none); Recovered: recovered from the
	// chain after the database lost it.
	RequestID string
	Recovered bool
	// Fee is what the transaction cost its signer in wei (nil when the node did not give the
	// effective gas price, or it has no receipt).
	Fee *big.Int
	// Reason says why an intent that waited for approval ended without a nonce (Status
	// EXPIRED, REJECTED or REFUSED; "" otherwise).
	Reason string
	// Position is the row's place in the feed; its cursor resumes after it.
	Position FeedPosition
}

// FeedPosition orders the completions feed: assigned under the sequencer's lock, held
// until the assigning transaction (a finality statement or a sequencer round) commits, so
// a position once served is never followed by a smaller one.
type FeedPosition int64

// FeedState is the sequencer's record: the highest position assigned, and the highest one
// retention deleted.
type FeedState struct {
	LastPosition  FeedPosition
	PrunedThrough FeedPosition
}

// CompletionPage is one page of the feed and the cursor that follows it.
type CompletionPage struct {
	Completions []Completion
	Next        string
}

// CompletionStore reads the feed and assigns its positions.
type CompletionStore interface {
	// ListAfter returns up to limit positioned completions after pos, in position order;
	// signers, when not nil, restricts them to those signers.
	ListAfter(ctx context.Context, pos FeedPosition, limit int, signers []string, chainID uint64) ([]Completion, error)
	// State reads the sequencer's record.
	State(ctx context.Context) (FeedState, error)
	// LegacyPosition maps a cursor from before positions ("<xid>-<seq>") onto a position.
	LegacyPosition(ctx context.Context, xid uint64, seq int64) (FeedPosition, error)
	// Pending reads the sequencer's record and whether any committed completion still
	// waits for a position, without locking anything: most rounds end there.
	Pending(ctx context.Context) (FeedState, bool, error)
	// LockSequencer starts a sequencer round: it locks the record until the transaction
	// ends, so rounds never overlap.
	LockSequencer(ctx context.Context, sess txmanager.Session) (FeedState, error)
	// AssignPositions positions up to limit committed, unpositioned completions after
	// last, in insertion order, and reports how many and the longest one waited.
	AssignPositions(ctx context.Context, sess txmanager.Session, last FeedPosition, limit int) (int, time.Duration, error)
}

// FeedNotifier wakes long-polling readers when the sequencer's look or round on this node
// saw the feed move (whoever assigned the positions); readers also poll.
type FeedNotifier struct {
	mu      sync.Mutex
	changed chan struct{}
}

// NewFeedNotifier builds the notifier.
func NewFeedNotifier() *FeedNotifier { return &FeedNotifier{changed: make(chan struct{})} }

// Changed is closed at the next Broadcast; take it before reading, so no change is missed.
func (n *FeedNotifier) Changed() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.changed
}

// Broadcast wakes everyone waiting on Changed.
func (n *FeedNotifier) Broadcast() {
	n.mu.Lock()
	defer n.mu.Unlock()
	close(n.changed)
	n.changed = make(chan struct{})
}

// FeedConfig sets the long-poll bound and how often a waiting reader looks again.
type FeedConfig struct {
	MaxWait      time.Duration
	PollInterval time.Duration
}

// CompletionsUseCase serves the completions feed (GET /api/v1/tx/completions and the
// WatchCompletions stream).
type CompletionsUseCase struct {
	store CompletionStore
	// standby holds a page back until it is on the synchronous standby: a position a
	// failover loses goes to another completion later.
	standby *StandbyWait
	notify  *FeedNotifier
	cfg     FeedConfig
}

// NewCompletionsUseCase wires the use case.
func NewCompletionsUseCase(store CompletionStore, standby *StandbyWait, notify *FeedNotifier, cfg FeedConfig) *CompletionsUseCase {
	return &CompletionsUseCase{store: store, standby: standby, notify: notify, cfg: cfg}
}

const (
	defaultCompletionPage = 100
	maxCompletionPage     = 1000
)

// ErrCursorExpired: the cursor points into completions retention already deleted; the
// reader must start again from a known state instead of silently skipping them.
var ErrCursorExpired = errors.New("cursor expired")

// MaxWait is the longest a read of the feed may wait for new completions (feed.maxWait).
func (uc *CompletionsUseCase) MaxWait() time.Duration { return uc.cfg.MaxWait }

// List returns the page after cursor ("" = from the start), of the given signers only when
// signers is not nil and of one chain only when chainID is not 0. Filtering keeps the cursor's guarantee: the filtered feed is a
// subsequence of the whole one. With wait > 0 an empty page is only returned once wait has
// passed (long-poll, cut to FeedConfig.MaxWait).
func (uc *CompletionsUseCase) List(ctx context.Context, cursor string, limit int, signers []string, chainID uint64, wait time.Duration) (CompletionPage, error) {
	switch {
	case limit == 0:
		limit = defaultCompletionPage
	case limit < 0 || limit > maxCompletionPage:
		return CompletionPage{}, &domain.ValidationError{Field: "limit", Reason: fmt.Sprintf("must be between 1 and %d", maxCompletionPage)}
	}
	if wait < 0 {
		return CompletionPage{}, &domain.ValidationError{Field: "wait", Reason: "must not be negative"}
	}
	// As a read of one transaction does: a client cannot know this deployment's bound, and
	// an empty page answered sooner only asks it to read again.
	wait = min(wait, uc.cfg.MaxWait)
	pos, head, err := uc.position(ctx, cursor)
	if err != nil {
		return CompletionPage{}, err
	}
	deadline := answerBy(ctx, wait)
	for {
		changed := uc.notify.Changed()
		items, err := uc.store.ListAfter(ctx, pos, limit, signers, chainID)
		if err != nil {
			return CompletionPage{}, &domain.UnavailableError{Reason: "completions feed", RetryAfter: time.Second, Err: err}
		}
		// Retention may have deleted past the cursor since position() looked: the page
		// would then start after a hole.
		if cursor != "" {
			if err := uc.stillKept(ctx, pos); err != nil {
				return CompletionPage{}, err
			}
		}
		remaining := time.Until(deadline)
		if len(items) > 0 || remaining <= 0 {
			next := pos
			if len(items) > 0 {
				next = items[len(items)-1].Position
			}
			if len(items) < limit {
				// Every completion up to the head read before the page was committed, so
				// the page holds all of them the filter takes: a filtered reader moves on
				// past other signers' completions, and its cursor does not fall behind
				// retention while its own signers are quiet.
				next = max(next, head)
			}
			if next > pos {
				if err := uc.standby.Read(ctx, "the completions feed's page"); err != nil {
					return CompletionPage{}, err
				}
			}
			return CompletionPage{Completions: items, Next: next.String()}, nil
		}
		select {
		case <-ctx.Done():
			return CompletionPage{Next: pos.String()}, nil
		case <-changed:
		case <-time.After(min(uc.cfg.PollInterval, remaining)):
		}
	}
}

// position decodes a cursor and refuses one that points into deleted completions, or past
// the feed's head; it returns the cursor's position and the head.
func (uc *CompletionsUseCase) position(ctx context.Context, cursor string) (pos, head FeedPosition, err error) {
	pos, legacy, err := ParseFeedCursor(cursor)
	if err != nil {
		return 0, 0, err
	}
	if legacy != nil {
		if pos, err = uc.store.LegacyPosition(ctx, legacy.xid, legacy.seq); err != nil {
			return 0, 0, &domain.UnavailableError{Reason: "completions feed", RetryAfter: time.Second, Err: err}
		}
	}
	state, err := uc.store.State(ctx)
	if err != nil {
		return 0, 0, &domain.UnavailableError{Reason: "completions feed", RetryAfter: time.Second, Err: err}
	}
	if cursor == "" {
		// The beginning is whatever retention left.
		return state.PrunedThrough, state.LastPosition, nil
	}
	if pos < state.PrunedThrough {
		return 0, 0, prunedError(pos, state.PrunedThrough)
	}
	if pos > state.LastPosition {
		// The feed never gave this position, or gave it and lost it: a failover to a standby
		// that had not received it (asynchronous replication) numbers the next completions
		// from below it, and reading on from the cursor would skip them.
		return 0, 0, fmt.Errorf("%w: position %d is past the feed's head (%d): the feed lost completions this reader saw (a database failover); read from the start (no after) or from a cursor at or below the head",
			ErrCursorExpired, pos, state.LastPosition)
	}
	return pos, state.LastPosition, nil
}

// stillKept refuses pos once retention has deleted past it.
func (uc *CompletionsUseCase) stillKept(ctx context.Context, pos FeedPosition) error {
	state, err := uc.store.State(ctx)
	if err != nil {
		return &domain.UnavailableError{Reason: "completions feed", RetryAfter: time.Second, Err: err}
	}
	if pos < state.PrunedThrough {
		return prunedError(pos, state.PrunedThrough)
	}
	return nil
}

func prunedError(pos, prunedThrough FeedPosition) error {
	return fmt.Errorf("%w: completions after position %d up to %d were deleted by retention; read from the start (no after) or from a newer cursor",
		ErrCursorExpired, pos, prunedThrough)
}

// String encodes the cursor clients pass back.
func (p FeedPosition) String() string { return strconv.FormatInt(int64(p), 10) }

type legacyCursor struct {
	xid uint64
	seq int64
}

// ParseFeedCursor decodes a cursor made by FeedPosition.String ("" is the start), or a
// cursor from before positions ("<xid>-<seq>"), which the store maps onto a position.
func ParseFeedCursor(s string) (FeedPosition, *legacyCursor, error) {
	if s == "" {
		return 0, nil, nil
	}
	bad := &domain.ValidationError{Field: "after", Reason: "not a cursor returned by this API"}
	if len(s) > 41 {
		return 0, nil, bad
	}
	if xid, seq, ok := strings.Cut(s, "-"); ok {
		x, err := strconv.ParseUint(xid, 10, 64)
		if err != nil {
			return 0, nil, bad
		}
		q, err := strconv.ParseInt(seq, 10, 64)
		if err != nil || q < 0 {
			return 0, nil, bad
		}
		return 0, &legacyCursor{xid: x, seq: q}, nil
	}
	p, err := strconv.ParseInt(s, 10, 64)
	if err != nil || p < 0 {
		return 0, nil, bad
	}
	return FeedPosition(p), nil, nil
}

// FeedSequencer positions committed completions that were written without a position:
// any node may run a round, and the store's lock makes rounds take turns, each assigning
// positions above every earlier round's and committing them at once. A reader therefore
// never meets a position below one it was already served, and the delay from a
// completion's commit to its position is one round, whatever else runs on the cluster.
//
// Finality, which writes nearly every completion, positions its own under the same lock in
// its one statement; what is left for rounds is the rare completion written by
// reconciliation or adoption (and any from an older version during a rolling upgrade), so
// a round first looks without locking and most end there. That look also reads the last
// position assigned anywhere, and wakes this node's long-polls when it moved.
type FeedSequencer struct {
	tx      txmanager.Manager
	store   CompletionStore
	notify  *FeedNotifier
	metrics *telemetry.Metrics
	// announced is the highest position this node's long-polls were woken for.
	announced atomic.Int64
	// lag is the longest wait of the rounds of the last feedLagWindow, for
	// completions_feed_lag_seconds: a round takes milliseconds and most are idle, so the
	// latest round alone reads 0 at nearly every scrape.
	lag *telemetry.WindowMax
}

// feedLagWindow spans at least one scrape interval (Prometheus' default is 15 s).
const feedLagWindow = 30 * time.Second

// sequencerRoundSize bounds one round; a backlog takes several rounds.
const sequencerRoundSize = 1000

// NewFeedSequencer wires the sequencer and its lag gauge.
func NewFeedSequencer(tx txmanager.Manager, store CompletionStore, notify *FeedNotifier, metrics *telemetry.Metrics) (*FeedSequencer, error) {
	s := &FeedSequencer{tx: tx, store: store, notify: notify, metrics: metrics, lag: telemetry.NewWindowMax(feedLagWindow, 6, nil)}
	err := metrics.RegisterFloatGauge(telemetry.CompletionsFeedLagSeconds,
		"Longest time a completion waited from its commit to its feed position in this node's sequencer rounds of the last 30 seconds (0 when idle).",
		func(_ context.Context, record func(float64, ...attribute.KeyValue)) {
			record(s.lag.Max())
		})
	return s, err
}

// Round runs one sequencer round and reports how many completions it positioned (a full
// round means there may be more).
func (s *FeedSequencer) Round(ctx context.Context) (int, bool, error) {
	state, pending, err := s.store.Pending(ctx)
	if err != nil {
		return 0, false, err
	}
	s.announce(state.LastPosition)
	if !pending {
		s.lag.Observe(0)
		return 0, false, nil
	}
	var positioned int
	var waited time.Duration
	err = s.tx.WithinTx(ctx, txmanager.DefaultOptions().WithTraceName("feed.sequence").WithRetries(2), func(ctx context.Context, sess txmanager.Session) error {
		state, err = s.store.LockSequencer(ctx, sess)
		if err != nil {
			return err
		}
		positioned, waited, err = s.store.AssignPositions(ctx, sess, state.LastPosition, sequencerRoundSize)
		return err
	})
	if err != nil {
		return 0, false, err
	}
	s.lag.Observe(waited.Seconds())
	s.announce(state.LastPosition + FeedPosition(positioned))
	return positioned, positioned == sequencerRoundSize, nil
}

// announce wakes this node's long-polls when the feed reached a position they were not
// woken for yet, whoever assigned it.
func (s *FeedSequencer) announce(last FeedPosition) {
	for {
		seen := s.announced.Load()
		if int64(last) <= seen {
			return
		}
		if s.announced.CompareAndSwap(seen, int64(last)) {
			s.notify.Broadcast()
			return
		}
	}
}

// Recent is the feed's last completions, up to n of them (fewer when signers filters some
// out), oldest first, with the cursor of the feed's end: what a page showing the latest
// completions starts from before it follows the feed.
func (uc *CompletionsUseCase) Recent(ctx context.Context, n int, signers []string) (CompletionPage, error) {
	state, err := uc.store.State(ctx)
	if err != nil {
		return CompletionPage{}, &domain.UnavailableError{Reason: "completions feed", RetryAfter: time.Second, Err: err}
	}
	from := max(state.LastPosition-FeedPosition(n), state.PrunedThrough, 0)
	items, err := uc.store.ListAfter(ctx, from, n, signers, 0)
	if err != nil {
		return CompletionPage{}, &domain.UnavailableError{Reason: "completions feed", RetryAfter: time.Second, Err: err}
	}
	// Even an empty page's cursor comes from the sequencer's record read here.
	if err := uc.standby.Read(ctx, "the completions feed's end"); err != nil {
		return CompletionPage{}, err
	}
	next := from
	if len(items) > 0 {
		next = items[len(items)-1].Position
	}
	return CompletionPage{Completions: items, Next: next.String()}, nil
}
