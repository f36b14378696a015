package txmclient

import (
	"context"
	"errors"
	"strconv"
	"time"

	kerrors "github.com/go-kratos/kratos/v2/errors"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
)

// metadataRetryAfter is where the service puts its retry hint (seconds) in ErrorInfo.
const metadataRetryAfter = "retry_after_seconds"

// retryableReasons are answers after which the same request may simply be sent again:
// nothing was written (NOT_LEADER, FENCED, UNAVAILABLE, RATE_LIMITED), or the outcome is
// unknown and the request id makes a retry return what was written (OUTCOME_UNKNOWN).
var retryableReasons = map[string]bool{
	v1.ErrorReason_UNAVAILABLE.String():     true,
	v1.ErrorReason_NOT_LEADER.String():      true,
	v1.ErrorReason_FENCED.String():          true,
	v1.ErrorReason_OUTCOME_UNKNOWN.String(): true,
	v1.ErrorReason_RATE_LIMITED.String():    true,
}

// Retryable reports whether err is worth sending the same request again for, and after how
// long the service asked (0 when it did not say).
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
		return retryableReasons[se.Reason], after
	}
	// No reason: the call did not reach the service's handlers (connection refused,
	// reset, a proxy's 503): a transport failure.
	if st, ok := status.FromError(err); ok {
		switch st.Code() {
		case codes.Unavailable, codes.ResourceExhausted, codes.Aborted:
			return true, after
		}
	}
	return false, 0
}

// retry runs call until it succeeds, fails for good, runs out of attempts or ctx ends.
// A NOT_LEADER answer moves on to the next endpoint at once, until every endpoint has said
// so; otherwise it waits what the service asked (Retry-After) or an exponential backoff.
func retry[T any](ctx context.Context, c *Client, call func(context.Context, node) (T, error)) (T, error) {
	var zero T
	backoff := c.cfg.Backoff
	current, notLeaders := 0, 0
	for attempt := 1; ; attempt++ {
		callCtx, err := c.withCredentials(ctx)
		if err != nil {
			return zero, err
		}
		out, err := call(callCtx, c.nodes[current%len(c.nodes)])
		if err == nil {
			return out, nil
		}
		again, after := Retryable(err)
		if !again || attempt >= c.cfg.MaxAttempts {
			return zero, err
		}
		current++
		if kerrors.FromError(err).Reason == v1.ErrorReason_NOT_LEADER.String() {
			if notLeaders++; notLeaders < len(c.nodes) {
				continue
			}
			notLeaders = 0
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

func durationOf(d time.Duration) *durationpb.Duration { return durationpb.New(d) }
