package controllers

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"

	kerrors "github.com/go-kratos/kratos/v2/errors"
	"github.com/go-kratos/kratos/v2/log"
	httpstatus "github.com/go-kratos/kratos/v2/transport/http/status"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// MetadataRetryAfter carries the retry hint in seconds; the HTTP server turns it into a
// Retry-After header.
const MetadataRetryAfter = "retry_after_seconds"

// ToAPIError is the one mapping from domain errors to API errors: a status and a stable
// reason. Causes of unavailability and internal errors are logged, not returned, so no
// detail of the infrastructure (hosts, SQL) reaches clients.
func ToAPIError(logger *log.Helper, err error) error {
	if err == nil {
		return nil
	}
	var (
		kerr        *kerrors.Error
		validation  *domain.ValidationError
		notLeader   *domain.NotLeaderError
		fenced      *domain.FencedError
		unavailable *domain.UnavailableError
	)
	switch {
	case errors.As(err, &kerr):
		return kerr
	case errors.As(err, &validation):
		return apiError(http.StatusBadRequest, v1.ErrorReason_INVALID_ARGUMENT, validation.Error(), "field", validation.Field)
	case errors.Is(err, domain.ErrUnknownSigner):
		return apiError(http.StatusUnprocessableEntity, v1.ErrorReason_UNKNOWN_SIGNER, err.Error())
	case errors.Is(err, domain.ErrIntentReverts):
		return apiError(http.StatusUnprocessableEntity, v1.ErrorReason_INTENT_REVERTS, err.Error())
	case errors.Is(err, domain.ErrInsufficientFunds):
		return apiError(http.StatusUnprocessableEntity, v1.ErrorReason_INSUFFICIENT_FUNDS, err.Error())
	case errors.Is(err, domain.ErrIdempotencyConflict):
		return apiError(http.StatusConflict, v1.ErrorReason_IDEMPOTENCY_CONFLICT, err.Error())
	case errors.As(err, &notLeader):
		return apiError(http.StatusConflict, v1.ErrorReason_NOT_LEADER, notLeader.Error(),
			MetadataRetryAfter, retryAfter(notLeader.RetryAfter), "owner", notLeader.Owner)
	case errors.As(err, &fenced):
		logger.Warnw("msg", "request fenced", "signer", fenced.Signer, "node_id", fenced.Node, "fencing_token", fenced.Token, "write", fenced.Write)
		return apiError(http.StatusConflict, v1.ErrorReason_FENCED, "lease for signer lost during the write; nothing was written",
			MetadataRetryAfter, retryAfter(time.Second))
	case errors.Is(err, services.ErrCursorExpired):
		return apiError(http.StatusGone, v1.ErrorReason_CURSOR_EXPIRED, err.Error())
	case errors.Is(err, domain.ErrNotFound):
		return apiError(http.StatusNotFound, v1.ErrorReason_NOT_FOUND, "transaction not found")
	case errors.Is(err, domain.ErrSignerQuarantined):
		return apiError(http.StatusConflict, v1.ErrorReason_SIGNER_QUARANTINED, err.Error())
	case errors.Is(err, domain.ErrOutcomeUnknown):
		logger.Warnw("msg", "create outcome unknown", "error", err.Error())
		return apiError(http.StatusServiceUnavailable, v1.ErrorReason_OUTCOME_UNKNOWN,
			"the database connection failed while the write was committing; it may have landed: retry with the same requestId",
			MetadataRetryAfter, retryAfter(time.Second))
	case errors.As(err, &unavailable):
		logger.Warnw("msg", "request unavailable", "reason", unavailable.Reason, "error", err.Error())
		return apiError(http.StatusServiceUnavailable, v1.ErrorReason_UNAVAILABLE, unavailable.Reason,
			MetadataRetryAfter, retryAfter(unavailable.RetryAfter))
	case errors.Is(err, context.Canceled):
		return apiError(httpstatus.ClientClosed, v1.ErrorReason_UNAVAILABLE, "request cancelled")
	case errors.Is(err, context.DeadlineExceeded):
		return apiError(http.StatusServiceUnavailable, v1.ErrorReason_UNAVAILABLE, "request timed out", MetadataRetryAfter, "1")
	default:
		logger.Errorw("msg", "unexpected error", "error", err.Error())
		return apiError(http.StatusInternalServerError, v1.ErrorReason_INTERNAL, "internal error")
	}
}

func apiError(status int, reason v1.ErrorReason, message string, metadata ...string) *kerrors.Error {
	e := kerrors.New(status, reason.String(), message)
	if len(metadata) > 0 {
		md := make(map[string]string, len(metadata)/2)
		for i := 0; i+1 < len(metadata); i += 2 {
			md[metadata[i]] = metadata[i+1]
		}
		e = e.WithMetadata(md)
	}
	return e
}

func retryAfter(d time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))
}
