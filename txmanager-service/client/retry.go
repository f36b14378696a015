package txmclient

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	kerrors "github.com/go-kratos/kratos/v2/errors"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
)

// metadataRetryAfter is where the service puts its retry hint (seconds) in ErrorInfo.
const metadataRetryAfter = "retry_after_seconds"

// Retryable reports whether err is worth sending the same request again for, and after how
// long the service asked (0 when it did not say). The answers that are:
//
//   - NOT_LEADER, FENCED, UNAVAILABLE, RATE_LIMITED, SIGNER_UNAVAILABLE: nothing was
//     written (the last: the signer's key source cannot sign now; it serves again by
//     itself once a signature succeeds);
//   - OUTCOME_UNKNOWN: the write may have landed, and the request id makes the retry
//     return what was written instead of writing it again;
//   - no answer at all (connection refused or reset, a proxy's 503, an attempt that ran
//     out of time): for a read or a create (its request id makes a second one a
//     replay) sending it again is safe.
//
// Everything else (INVALID_ARGUMENT, IDEMPOTENCY_CONFLICT, UNKNOWN_SIGNER,
// INSUFFICIENT_FUNDS, SIGNER_QUARANTINED, CURSOR_EXPIRED, ...) would be answered the same
// way again: fix the request, or, for a quarantine, have an operator release the signer.
func Retryable(err error) (bool, time.Duration) {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false, 0
	}
	se := kerrors.FromError(err)
	var after time.Duration
	if s, ok := se.Metadata[metadataRetryAfter]; ok {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			after = time.Duration(n) * time.Second
		}
	}
	if se.Reason != "" {
		again := v1.IsNotLeader(err) || v1.IsFenced(err) || v1.IsUnavailable(err) || v1.IsRateLimited(err) || v1.IsOutcomeUnknown(err) ||
			v1.IsSignerUnavailable(err)
		return again, after
	}
	if transportFailure(err) {
		return true, after
	}
	return false, 0
}

// transportFailure: the call got no answer from the service's handlers.
func transportFailure(err error) bool {
	if kerrors.FromError(err).Reason != "" {
		return false
	}
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	switch st.Code() {
	case codes.ResourceExhausted:
		// gRPC's own refusal of a message over a size limit, either way, is the same
		// every time it is sent.
		return !strings.Contains(st.Message(), "larger than max")
	case codes.Unavailable, codes.Aborted, codes.DeadlineExceeded:
		return true
	}
	return false
}

// idempotency says what may be sent again.
type idempotency int

const (
	// idempotent: reads, and creates (their request id makes a second one a replay).
	idempotent idempotency = iota
	// refusedOnly: an operator's action (resolve, release) is sent again only after an
	// answer saying it was not carried out, NOT_LEADER or RATE_LIMITED (refused at the
	// door): after a lost answer it may have been, and the operator decides.
	refusedOnly
)

// mayRetry applies the idempotency class to Retryable.
func (i idempotency) mayRetry(err error) (bool, time.Duration) {
	again, after := Retryable(err)
	if !again || i == idempotent {
		return again, after
	}
	return v1.IsNotLeader(err) || v1.IsRateLimited(err), after
}

// retry runs call until it succeeds, fails for good, runs out of attempts or ctx ends;
// each attempt has timeout. A NOT_LEADER answer, or an endpoint that cannot be reached,
// moves on to the next endpoint at once, until every endpoint has failed so; otherwise it
// waits what the service asked (Retry-After) or an exponential backoff.
func retry[T any](ctx context.Context, c *Client, class idempotency, timeout time.Duration, call func(context.Context, node) (T, error)) (T, error) {
	return retryFrom(ctx, c, 0, class, timeout, call)
}

// retryFrom is retry starting at endpoint first (modulo their number).
func retryFrom[T any](ctx context.Context, c *Client, first int, class idempotency, timeout time.Duration, call func(context.Context, node) (T, error)) (T, error) {
	var zero T
	backoff := c.cfg.Backoff
	current, hops := first, 0
	for n := 1; ; n++ {
		out, err := attempt(ctx, c, timeout, func(ctx context.Context) (T, error) { return call(ctx, c.nodes[current%len(c.nodes)]) })
		if err == nil {
			return out, nil
		}
		if ctx.Err() != nil {
			// The caller's deadline or cancellation ended the attempt: say so, so that
			// errors.Is(err, context.DeadlineExceeded) holds.
			return zero, errors.Join(err, ctx.Err())
		}
		again, after := class.mayRetry(err)
		hop := v1.IsNotLeader(err) || transportFailure(err)
		limit := c.cfg.MaxAttempts
		if hop {
			// Every endpoint is tried once however few attempts are allowed: in basic
			// routing the signer's owner may be the last of them.
			limit = max(limit, len(c.nodes))
		}
		if !again || n >= limit {
			return zero, err
		}
		current++
		if hop {
			if hops++; hops < len(c.nodes) {
				continue
			}
			hops = 0
		}
		wait := after
		if wait == 0 {
			wait = backoff
			backoff = min(backoff*2, 5*time.Second)
		}
		select {
		case <-ctx.Done():
			return zero, errors.Join(err, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// attempt runs one call with the credentials and its own deadline.
func attempt[T any](ctx context.Context, c *Client, timeout time.Duration, call func(context.Context) (T, error)) (T, error) {
	var zero T
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ctx, err := c.withCredentials(ctx)
	if err != nil {
		return zero, err
	}
	return call(ctx)
}

func durationOf(d time.Duration) *durationpb.Duration { return durationpb.New(d) }
