package services

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	kerrors "github.com/go-kratos/kratos/v2/errors"
)

func TestBackoff(t *testing.T) {
	t.Parallel()
	tests := []struct {
		attempts int
		want     time.Duration
	}{
		{0, time.Second}, {1, 2 * time.Second}, {2, 4 * time.Second}, {5, 32 * time.Second},
		{6, time.Minute}, {60, time.Minute}, {1 << 20, time.Minute},
	}
	for _, tt := range tests {
		if got := Backoff(time.Second, time.Minute, tt.attempts); got != tt.want {
			t.Errorf("Backoff(1s, 1m, %d) = %s, want %s", tt.attempts, got, tt.want)
		}
	}
}

func TestRejection(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		err   error
		final bool
	}{
		{"invalid argument", kerrors.BadRequest("INVALID_ARGUMENT", "to"), true},
		{"intent reverts", kerrors.New(422, "INTENT_REVERTS", "revert"), true},
		{"idempotency conflict", kerrors.Conflict("IDEMPOTENCY_CONFLICT", "x"), true},
		{"insufficient funds waits for funds", kerrors.New(422, "INSUFFICIENT_FUNDS", "poor"), false},
		{"unknown signer waits for configuration", kerrors.BadRequest("UNKNOWN_SIGNER", "?"), false},
		{"unavailable", kerrors.ServiceUnavailable("UNAVAILABLE", "busy"), false},
		{"wrapped deadline", fmt.Errorf("send: %w", context.DeadlineExceeded), false},
		{"plain error", errors.New("connection refused"), false},
	}
	for _, tt := range tests {
		if _, final := Rejection(tt.err); final != tt.final {
			t.Errorf("%s: final = %t, want %t", tt.name, final, tt.final)
		}
	}
}
