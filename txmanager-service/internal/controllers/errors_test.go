package controllers_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"
	kerrors "github.com/go-kratos/kratos/v2/errors"
	"github.com/go-kratos/kratos/v2/log"
	httpstatus "github.com/go-kratos/kratos/v2/transport/http/status"
	"github.com/jackc/pgx/v5/pgconn"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/controllers"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// Every domain error reaches the client as its stable reason with the status
// error_reason.proto gives it, the retry hint where one is worth waiting for, and no detail
// of the infrastructure (hosts, SQL) in the message: those are logged instead.
func TestToAPIErrorMapsEveryDomainError(t *testing.T) {
	t.Parallel()
	secret := errors.New(`dial tcp db.internal:5432: connection refused (SELECT * FROM managed_tx)`)
	tests := []struct {
		name   string
		err    error
		status int
		reason v1.ErrorReason
		// metadata the answer must carry (all of it).
		metadata map[string]string
		// logged: the cause is logged rather than answered.
		logged bool
	}{
		{name: "validation names the field", err: &domain.ValidationError{Field: "gasLimit", Reason: "required"},
			status: http.StatusBadRequest, reason: v1.ErrorReason_INVALID_ARGUMENT, metadata: map[string]string{"field": "gasLimit"}},
		{name: "unknown signer", err: fmt.Errorf("create: %w", domain.ErrUnknownSigner),
			status: http.StatusUnprocessableEntity, reason: v1.ErrorReason_UNKNOWN_SIGNER},
		{name: "intent reverts", err: fmt.Errorf("%w: execution reverted", domain.ErrIntentReverts),
			status: http.StatusUnprocessableEntity, reason: v1.ErrorReason_INTENT_REVERTS},
		{name: "insufficient funds", err: fmt.Errorf("%w: balance 0", domain.ErrInsufficientFunds),
			status: http.StatusUnprocessableEntity, reason: v1.ErrorReason_INSUFFICIENT_FUNDS},
		{name: "idempotency conflict", err: domain.ErrIdempotencyConflict,
			status: http.StatusConflict, reason: v1.ErrorReason_IDEMPOTENCY_CONFLICT},
		{name: "not leader names the owner and rounds the wait up", err: &domain.NotLeaderError{Signer: "0xaa", Owner: "node-b#x1", RetryAfter: 1500 * time.Millisecond},
			status: http.StatusConflict, reason: v1.ErrorReason_NOT_LEADER, metadata: map[string]string{"owner": "node-b#x1", controllers.MetadataRetryAfter: "2"}},
		{name: "not leader without a hint still says when", err: &domain.NotLeaderError{Signer: "0xaa", Owner: "node-b"},
			status: http.StatusConflict, reason: v1.ErrorReason_NOT_LEADER, metadata: map[string]string{controllers.MetadataRetryAfter: "1"}},
		{name: "fenced", err: &domain.FencedError{Signer: "0xaa", Node: "node-a", Token: 7, Write: "allocate"},
			status: http.StatusConflict, reason: v1.ErrorReason_FENCED, metadata: map[string]string{controllers.MetadataRetryAfter: "1"}, logged: true},
		{name: "cursor expired", err: fmt.Errorf("%w: pruned", services.ErrCursorExpired),
			status: http.StatusGone, reason: v1.ErrorReason_CURSOR_EXPIRED},
		{name: "not found", err: fmt.Errorf("tx 1: %w", domain.ErrNotFound),
			status: http.StatusNotFound, reason: v1.ErrorReason_NOT_FOUND},
		{name: "signer quarantined", err: domain.ErrSignerQuarantined,
			status: http.StatusConflict, reason: v1.ErrorReason_SIGNER_QUARANTINED},
		{name: "signer retired", err: domain.ErrSignerRetired,
			status: http.StatusConflict, reason: v1.ErrorReason_SIGNER_RETIRED},
		{name: "signer active with another key", err: fmt.Errorf("%w: keystore", domain.ErrSignerActive),
			status: http.StatusConflict, reason: v1.ErrorReason_SIGNER_ACTIVE},
		{name: "a key source that failed to sign", err: fmt.Errorf("resolve: %w", &services.KeySourceError{Err: errors.New("kms: key disabled")}),
			status: 503, reason: v1.ErrorReason_SIGNER_UNAVAILABLE, metadata: map[string]string{controllers.MetadataRetryAfter: "5"}, logged: true},
		{name: "a node without the signer's key failed to sign", err: fmt.Errorf("resolve: %w", &services.KeySourceError{Err: fmt.Errorf("%w: no key source holds it", domain.ErrUnknownSigner)}),
			status: 503, reason: v1.ErrorReason_SIGNER_UNAVAILABLE, metadata: map[string]string{controllers.MetadataRetryAfter: "5"}, logged: true},
		{name: "signer cannot sign: its key source's error is logged", err: &domain.SignerUnavailableError{Signer: "0xaa", Since: time.Unix(0, 0), Unsigned: 3,
			Cause: "AccessDeniedException: arn:aws:iam::123456789012:role/txm is not allowed kms:Sign at kms.db.internal", RetryAfter: 10 * time.Second},
			status: http.StatusServiceUnavailable, reason: v1.ErrorReason_SIGNER_UNAVAILABLE, metadata: map[string]string{controllers.MetadataRetryAfter: "10"}, logged: true},
		{name: "outcome unknown", err: fmt.Errorf("%w: %w", domain.ErrOutcomeUnknown, secret),
			status: http.StatusServiceUnavailable, reason: v1.ErrorReason_OUTCOME_UNKNOWN, metadata: map[string]string{controllers.MetadataRetryAfter: "1"}, logged: true},
		{name: "unavailable answers its reason, not its cause", err: &domain.UnavailableError{Reason: "lease store", RetryAfter: 3 * time.Second, Err: secret},
			status: http.StatusServiceUnavailable, reason: v1.ErrorReason_UNAVAILABLE, metadata: map[string]string{controllers.MetadataRetryAfter: "3"}, logged: true},
		{name: "caller gone", err: fmt.Errorf("read: %w", context.Canceled),
			status: httpstatus.ClientClosed, reason: v1.ErrorReason_UNAVAILABLE},
		{name: "deadline passed while the writer held the create", err: fmt.Errorf("%w: %w", domain.ErrOutcomeUnknown, context.DeadlineExceeded),
			status: http.StatusServiceUnavailable, reason: v1.ErrorReason_OUTCOME_UNKNOWN, metadata: map[string]string{controllers.MetadataRetryAfter: "1"}, logged: true},
		{name: "deadline passed", err: fmt.Errorf("read: %w", context.DeadlineExceeded),
			status: http.StatusServiceUnavailable, reason: v1.ErrorReason_UNAVAILABLE, metadata: map[string]string{controllers.MetadataRetryAfter: "1"}},
		{name: "a database shutting down", err: fmt.Errorf("webhook replay: %w", &pgconn.PgError{Code: "57P01", Message: "terminating connection at db.internal"}),
			status: http.StatusServiceUnavailable, reason: v1.ErrorReason_UNAVAILABLE, metadata: map[string]string{controllers.MetadataRetryAfter: "1"}, logged: true},
		{name: "a statement timeout", err: fmt.Errorf("count: %w", &pgconn.PgError{Code: "57014", Message: "canceling statement due to statement timeout"}),
			status: http.StatusServiceUnavailable, reason: v1.ErrorReason_UNAVAILABLE, metadata: map[string]string{controllers.MetadataRetryAfter: "1"}, logged: true},
		{name: "a transaction the library gave up retrying", err: fmt.Errorf("policy set: %w", txmanager.ErrRetryableTx),
			status: http.StatusServiceUnavailable, reason: v1.ErrorReason_UNAVAILABLE, metadata: map[string]string{controllers.MetadataRetryAfter: "1"}, logged: true},
		{name: "a constraint the service broke is still internal", err: fmt.Errorf("insert: %w", &pgconn.PgError{Code: "23505", Message: "SELECT duplicate key at db.internal"}),
			status: http.StatusInternalServerError, reason: v1.ErrorReason_INTERNAL, logged: true},
		{name: "an API error passes unchanged", err: fmt.Errorf("owner: %w", v1.ErrorPermissionDenied("caller x")),
			status: http.StatusForbidden, reason: v1.ErrorReason_PERMISSION_DENIED},
		{name: "anything else is internal", err: secret,
			status: http.StatusInternalServerError, reason: v1.ErrorReason_INTERNAL, logged: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var logs bytes.Buffer
			got := controllers.ToAPIError(log.NewHelper(log.NewStdLogger(&logs)), tt.err)
			var se *kerrors.Error
			if !errors.As(got, &se) {
				t.Fatalf("ToAPIError(%v) = %T %v, want an API error", tt.err, got, got)
			}
			if int(se.Code) != tt.status || se.Reason != tt.reason.String() {
				t.Errorf("answered %d %s, want %d %s", se.Code, se.Reason, tt.status, tt.reason)
			}
			for k, v := range tt.metadata {
				if se.Metadata[k] != v {
					t.Errorf("metadata %s = %q, want %q (all: %v)", k, se.Metadata[k], v, se.Metadata)
				}
			}
			if strings.Contains(se.Message, "db.internal") || strings.Contains(se.Message, "SELECT") {
				t.Errorf("the answer %q leaks the infrastructure", se.Message)
			}
			if tt.logged != (logs.Len() > 0) {
				t.Errorf("logged %q, want logged=%t", logs.String(), tt.logged)
			}
		})
	}
	if controllers.ToAPIError(log.NewHelper(log.DefaultLogger), nil) != nil {
		t.Error("ToAPIError(nil) is not nil: a success would answer an error")
	}
}
