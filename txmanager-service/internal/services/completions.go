package services

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/google/uuid"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// Completion is one final result in the feed.
type Completion struct {
	TxID        uuid.UUID
	Signer      common.Address
	Nonce       uint64
	Status      domain.State
	TxHash      *common.Hash
	BlockNumber uint64
	CompletedAt time.Time
	// Position is the row's place in the feed.
	Position FeedPosition
}

// FeedPosition orders the completions feed: writing transaction id, then sequence.
type FeedPosition struct {
	Xid uint64
	Seq int64
}

// CompletionPage is one page of the feed and the cursor that follows it.
type CompletionPage struct {
	Completions []Completion
	Next        string
}

// CompletionStore reads the feed.
type CompletionStore interface {
	// ListAfter returns up to limit completions strictly after pos, in feed order, only from
	// transactions that can no longer be overtaken by one still running.
	// signers, when not nil, restricts the feed to those signers.
	ListAfter(ctx context.Context, pos FeedPosition, limit int, signers []string) ([]Completion, error)
}

// CompletionsUseCase serves GET /api/v1/tx/completions.
type CompletionsUseCase struct {
	store CompletionStore
}

// NewCompletionsUseCase wires the use case.
func NewCompletionsUseCase(store CompletionStore) *CompletionsUseCase {
	return &CompletionsUseCase{store: store}
}

const (
	defaultCompletionPage = 100
	maxCompletionPage     = 1000
)

// List returns the page after cursor ("" = from the start), of the given signers only when
// signers is not nil. Filtering keeps the cursor's guarantee: the filtered feed is a
// subsequence of the whole one.
func (uc *CompletionsUseCase) List(ctx context.Context, cursor string, limit int, signers []string) (CompletionPage, error) {
	pos, err := ParseFeedCursor(cursor)
	if err != nil {
		return CompletionPage{}, err
	}
	switch {
	case limit == 0:
		limit = defaultCompletionPage
	case limit < 0 || limit > maxCompletionPage:
		return CompletionPage{}, &domain.ValidationError{Field: "limit", Reason: fmt.Sprintf("must be between 1 and %d", maxCompletionPage)}
	}
	items, err := uc.store.ListAfter(ctx, pos, limit, signers)
	if err != nil {
		return CompletionPage{}, &domain.UnavailableError{Reason: "completions feed", RetryAfter: time.Second, Err: err}
	}
	if len(items) > 0 {
		pos = items[len(items)-1].Position
	}
	return CompletionPage{Completions: items, Next: pos.String()}, nil
}

// String encodes the cursor clients pass back.
func (p FeedPosition) String() string {
	return strconv.FormatUint(p.Xid, 10) + "-" + strconv.FormatInt(p.Seq, 10)
}

// ParseFeedCursor decodes a cursor made by FeedPosition.String; "" is the start.
func ParseFeedCursor(s string) (FeedPosition, error) {
	if s == "" {
		return FeedPosition{}, nil
	}
	bad := &domain.ValidationError{Field: "after", Reason: "not a cursor returned by this API"}
	xid, seq, ok := strings.Cut(s, "-")
	if !ok || len(s) > 41 {
		return FeedPosition{}, bad
	}
	x, err := strconv.ParseUint(xid, 10, 64)
	if err != nil {
		return FeedPosition{}, bad
	}
	q, err := strconv.ParseInt(seq, 10, 64)
	if err != nil || q < 0 {
		return FeedPosition{}, bad
	}
	return FeedPosition{Xid: x, Seq: q}, nil
}
