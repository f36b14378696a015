package services

import (
	"errors"
	"testing"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

func TestParseFeedCursor(t *testing.T) {
	tests := []struct {
		cursor     string
		want       FeedPosition
		wantLegacy *legacyCursor
		wantErr    bool
	}{
		{"", 0, nil, false},
		{"42", 42, nil, false},
		{"9223372036854775807", 9223372036854775807, nil, false},
		{"7-3", 0, &legacyCursor{xid: 7, seq: 3}, false},
		{"-1", 0, nil, true},
		{"7--3", 0, nil, true},
		{"x-3", 0, nil, true},
		{"12abc", 0, nil, true},
		{"99999999999999999999", 0, nil, true},
		{"1234567890123456789012345678901234567890123", 0, nil, true},
	}
	for _, tc := range tests {
		got, legacy, err := ParseFeedCursor(tc.cursor)
		if (err != nil) != tc.wantErr {
			t.Errorf("%q: err %v, want error %v", tc.cursor, err, tc.wantErr)
			continue
		}
		if err != nil {
			if !errors.Is(err, domain.ErrInvalidArgument) {
				t.Errorf("%q: %v is not INVALID_ARGUMENT", tc.cursor, err)
			}
			continue
		}
		if got != tc.want || (legacy == nil) != (tc.wantLegacy == nil) || (legacy != nil && *legacy != *tc.wantLegacy) {
			t.Errorf("%q: %v %+v, want %v %+v", tc.cursor, got, legacy, tc.want, tc.wantLegacy)
		}
		if legacy == nil && tc.cursor != "" && got.String() != tc.cursor {
			t.Errorf("%q: does not round-trip (%s)", tc.cursor, got)
		}
	}
}

// A broadcast wakes every reader waiting on the channel it held, and only those.
func TestFeedNotifierWakesWaiters(t *testing.T) {
	n := NewFeedNotifier()
	before := n.Changed()
	n.Broadcast()
	select {
	case <-before:
	case <-time.After(time.Second):
		t.Fatal("a waiter was not woken")
	}
	after := n.Changed()
	select {
	case <-after:
		t.Fatal("a waiter that came after the broadcast was woken by it")
	default:
	}
}

func TestCreateResultLabel(t *testing.T) {
	tests := []struct {
		res  CreateResult
		err  error
		want string
	}{
		{CreateResult{Created: true}, nil, "created"},
		{CreateResult{}, nil, "existing"},
		{CreateResult{}, domain.ErrIdempotencyConflict, "conflict"},
		{CreateResult{}, &domain.ValidationError{Field: "to", Reason: "bad"}, "invalid"},
		{CreateResult{}, domain.ErrInsufficientFunds, "invalid"},
		{CreateResult{}, &domain.UnavailableError{Reason: "x"}, "unavailable"},
		{CreateResult{}, errors.New("boom"), "error"},
	}
	for _, tc := range tests {
		if got := createResultLabel(tc.res, tc.err); got != tc.want {
			t.Errorf("%+v %v: %s, want %s", tc.res, tc.err, got, tc.want)
		}
	}
}
