package controllers

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/bionicotaku/lingo-utils/txmanager"
	kerrors "github.com/go-kratos/kratos/v2/errors"
	"github.com/go-kratos/kratos/v2/log"
	httpstatus "github.com/go-kratos/kratos/v2/transport/http/status"
	"github.com/jackc/pgx/v5/pgconn"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/domain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// MetadataRetryAfter carries the retry hint in seconds; the HTTP server turns it into a
// Retry-After header.
const MetadataRetryAfter = "retry_after_seconds"

// ToAPIError is the one mapping from domain errors to API errors: a stable reason, answered
// with the status error_reason.proto gives it (the generated ErrorX constructors). Causes of unavailability and internal errors are logged, not returned, so no
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
		cannotSign  *domain.SignerUnavailableError
		keySource   *services.KeySourceError
		notFound    *domain.NotFoundError
		denied      *domain.PolicyDeniedError
		unanswered  *unansweredCreate
	)
	switch {
	case errors.As(err, &kerr):
		return kerr
	case errors.As(err, &validation):
		return withMetadata(v1.ErrorInvalidArgument("%s", validation.Error()), "field", validation.Field)
	case errors.As(err, &keySource):
		// A signature an operator's action needed (a stuck resolution) failed at the key
		// source: the key source's condition, not the service's fault. Its text is cleaned.
		// Before the unknown signer: a node that holds no key for the signer is this node's
		// condition, not a signer that does not exist.
		logger.Warnw("msg", "a key source failed to sign", "error", keySource.Error())
		return withMetadata(v1.ErrorSignerUnavailable("the signer's key source failed to sign: %s", keySource.Error()), MetadataRetryAfter, retryAfter(5*time.Second))
	case errors.Is(err, domain.ErrUnknownSigner):
		return v1.ErrorUnknownSigner("%s", err.Error())
	case errors.Is(err, domain.ErrIntentReverts):
		return v1.ErrorIntentReverts("%s", err.Error())
	case errors.Is(err, domain.ErrInsufficientFunds):
		return v1.ErrorInsufficientFunds("%s", err.Error())
	case errors.Is(err, domain.ErrIdempotencyConflict):
		return v1.ErrorIdempotencyConflict("%s", err.Error())
	case errors.As(err, &notLeader):
		return withMetadata(v1.ErrorNotLeader("%s", notLeader.Error()),
			MetadataRetryAfter, retryAfter(notLeader.RetryAfter), "owner", notLeader.Owner)
	case errors.As(err, &fenced):
		logger.Warnw("msg", "request fenced", "signer", fenced.Signer, "node_id", fenced.Node, "fencing_token", fenced.Token, "write", fenced.Write)
		return withMetadata(v1.ErrorFenced("lease for signer lost during the write; nothing was written"),
			MetadataRetryAfter, retryAfter(time.Second))
	case errors.Is(err, services.ErrCursorExpired):
		return v1.ErrorCursorExpired("%s", err.Error())
	case errors.As(err, &notFound):
		return v1.ErrorNotFound("%s", notFound.What)
	case errors.Is(err, domain.ErrNotFound):
		return v1.ErrorNotFound("transaction not found")
	case errors.Is(err, domain.ErrSignerQuarantined):
		return v1.ErrorSignerQuarantined("%s", err.Error())
	case errors.Is(err, domain.ErrSignerRetired):
		return v1.ErrorSignerRetired("%s", err.Error())
	case errors.Is(err, domain.ErrSignerPaused):
		return v1.ErrorSignerPaused("%s", err.Error())
	case errors.As(err, &denied):
		return withMetadata(v1.ErrorPolicyDenied("%s", denied.Error()), "rule", denied.Rule, "scope", denied.Scope, "version", strconv.FormatInt(denied.Version, 10))
	case errors.Is(err, domain.ErrDestinationForbidden):
		return withMetadata(v1.ErrorInvalidArgument("%s", err.Error()), "field", "url")
	case errors.Is(err, domain.ErrApprovalForbidden):
		return v1.ErrorApprovalForbidden("%s", err.Error())
	case errors.Is(err, domain.ErrApprovalClosed):
		return v1.ErrorApprovalClosed("%s", err.Error())
	case errors.Is(err, domain.ErrAlreadyDecided):
		return v1.ErrorAlreadyDecided("%s", err.Error())
	case errors.Is(err, domain.ErrSignerActive):
		return v1.ErrorSignerActive("%s", err.Error())
	case errors.As(err, &cannotSign):
		logger.Warnw("msg", "create for a signer that cannot sign", "error", cannotSign.Error())
		return withMetadata(v1.ErrorSignerUnavailable("%s; operators find the key source's error in the signer's status", cannotSign.Summary()),
			MetadataRetryAfter, retryAfter(cannotSign.RetryAfter))
	case errors.As(err, &unanswered):
		logger.Warnw("msg", "forwarded create without a requestId unanswered", "error", err.Error())
		return v1.ErrorOutcomeUnknown("the create went to the signer's owner, which did not answer: it may have been made, and without a requestId a second create could not be told from it, so it was not sent again; look for it before sending it again, and send creates with a requestId, whose retries are safe")
	case errors.Is(err, domain.ErrOutcomeUnknown) && (errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)):
		logger.Warnw("msg", "create outcome unknown", "error", err.Error())
		return withMetadata(v1.ErrorOutcomeUnknown("the request's time ran out while its create was being written: it may have been made; a create with a requestId is safe to send again, one without could be made twice, so look for it first"),
			MetadataRetryAfter, retryAfter(time.Second))
	case errors.Is(err, domain.ErrOutcomeUnknown):
		logger.Warnw("msg", "create outcome unknown", "error", err.Error())
		return withMetadata(v1.ErrorOutcomeUnknown("the write may have landed but is not known to be durable (the database connection failed while it committed, or the database's standby has not confirmed it yet): retry with the same requestId"),
			MetadataRetryAfter, retryAfter(time.Second))
	case errors.As(err, &unavailable):
		logger.Warnw("msg", "request unavailable", "reason", unavailable.Reason, "error", err.Error())
		return withMetadata(v1.ErrorUnavailable("%s", unavailable.Reason), MetadataRetryAfter, retryAfter(unavailable.RetryAfter))
	case errors.Is(err, context.Canceled):
		// Nobody reads this answer; 499 says in the access log that the caller left.
		return kerrors.New(httpstatus.ClientClosed, v1.ErrorReason_UNAVAILABLE.String(), "request cancelled")
	case errors.Is(err, context.DeadlineExceeded):
		return withMetadata(v1.ErrorUnavailable("request timed out"), MetadataRetryAfter, "1")
	case databaseUnavailable(err):
		logger.Warnw("msg", "request failed on the database's condition", "error", err.Error())
		return withMetadata(v1.ErrorUnavailable("the database is unavailable for now"), MetadataRetryAfter, "1")
	default:
		logger.Errorw("msg", "unexpected error", "error", err.Error())
		return v1.ErrorInternal("internal error")
	}
}

// withMetadata attaches key/value pairs to an API error.
func withMetadata(e *kerrors.Error, kv ...string) *kerrors.Error {
	md := make(map[string]string, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		md[kv[i]] = kv[i+1]
	}
	return e.WithMetadata(md)
}

func retryAfter(d time.Duration) string {
	return strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))
}

// databaseUnavailable: err is the database's passing condition, not a fault of the request
// or the service: a connection that failed or was cut, a server shutting down or out of
// resources, a statement or lock timeout, a conflict the library would run again. Such a
// request is answered 503 with a time to retry, wherever in the service it failed.
func databaseUnavailable(err error) bool {
	var connect *pgconn.ConnectError
	if txmanager.IsRetryable(err) || errors.Is(err, txmanager.ErrTxTimeout) || pgconn.Timeout(err) || pgconn.SafeToRetry(err) || errors.As(err, &connect) {
		return true
	}
	state := txmanager.SQLState(err)
	switch {
	case strings.HasPrefix(state, "08"), strings.HasPrefix(state, "53"): // connection exceptions, insufficient resources
		return true
	}
	switch state {
	case "57P01", "57P02", "57P03", // the server shutting down, crashed, or not yet accepting connections
		"57014",          // a statement timeout
		"55P03",          // a lock timeout
		"40001", "40P01": // a serialization failure, a deadlock
		return true
	}
	return false
}
