package txmclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	kerrors "github.com/go-kratos/kratos/v2/errors"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
)

// Which answers are sent again, and after how long, per idempotency class.
func TestRetryRules(t *testing.T) {
	retryAfter := func(e *kerrors.Error, seconds string) error {
		return e.WithMetadata(map[string]string{metadataRetryAfter: seconds})
	}
	tests := []struct {
		name        string
		err         error
		idempotent  bool
		refusedOnly bool
		after       time.Duration
	}{
		{"not leader, with Retry-After", retryAfter(v1.ErrorNotLeader("owner elsewhere"), "2"), true, true, 2 * time.Second},
		{"rate limited", retryAfter(v1.ErrorRateLimited("slow down"), "1"), true, true, time.Second},
		{"fenced", v1.ErrorFenced("lease lost"), true, false, 0},
		{"unavailable", v1.ErrorUnavailable("no endpoint"), true, false, 0},
		{"outcome unknown", v1.ErrorOutcomeUnknown("commit lost"), true, false, 0},
		{"signer cannot sign, with Retry-After", retryAfter(v1.ErrorSignerUnavailable("kms hangs"), "5"), true, false, 5 * time.Second},
		{"not leader through gRPC", kerrors.FromError(v1.ErrorNotLeader("x").GRPCStatus().Err()), true, true, 0},
		{"connection refused", status.Error(codes.Unavailable, "connection refused"), true, false, 0},
		{"attempt timed out", status.Error(codes.DeadlineExceeded, "stream terminated"), true, false, 0},
		{"invalid argument", v1.ErrorInvalidArgument("bad"), false, false, 0},
		{"idempotency conflict", v1.ErrorIdempotencyConflict("other intent"), false, false, 0},
		{"quarantined", v1.ErrorSignerQuarantined("held"), false, false, 0},
		{"insufficient funds", v1.ErrorInsufficientFunds("poor"), false, false, 0},
		{"cursor expired", v1.ErrorCursorExpired("gone"), false, false, 0},
		{"not found", v1.ErrorNotFound("none"), false, false, 0},
		{"caller cancelled", fmt.Errorf("call: %w", context.Canceled), false, false, 0},
		{"caller deadline", context.DeadlineExceeded, false, false, 0},
		{"a plain error", io.ErrUnexpectedEOF, false, false, 0},
		{"no error", nil, false, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			again, after := idempotent.mayRetry(tt.err)
			if again != tt.idempotent || (again && after != tt.after) {
				t.Errorf("idempotent: retry %v after %s, want %v after %s", again, after, tt.idempotent, tt.after)
			}
			if again, _ := refusedOnly.mayRetry(tt.err); again != tt.refusedOnly {
				t.Errorf("refusedOnly: retry %v, want %v", again, tt.refusedOnly)
			}
		})
	}
}

// A create without a request id is refused before anything is sent.
func TestCreateNeedsARequestID(t *testing.T) {
	c, closeClient, err := New(context.Background(), Config{Endpoints: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer closeClient()
	if _, err := c.Create(context.Background(), &v1.CreateTxRequest{Signer: "0x1"}); !errors.Is(err, ErrRequestIDRequired) {
		t.Fatalf("create without a request id: %v", err)
	}
}
