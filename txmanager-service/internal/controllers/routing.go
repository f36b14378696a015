package controllers

import (
	"context"
	"errors"
	"time"

	kerrors "github.com/go-kratos/kratos/v2/errors"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// HopsHeader counts how many times a request has been forwarded between nodes.
const HopsHeader = "x-txm-hops"

// OwnerForwarder sends a request to the node holding the signer's lease (internal gRPC).
type OwnerForwarder interface {
	ForwardCreate(ctx context.Context, owner string, req *v1.CreateTxRequest) (*v1.CreateTxResponse, error)
	ForwardResolve(ctx context.Context, owner string, req *v1.ResolveTxRequest) (*v1.ResolveTxResponse, error)
}

// Routing is the routing mode (docs/design.md#routing). In basic mode a non-owner answers
// NOT_LEADER; in forward mode it forwards to the owner and, when the owner cannot be
// reached, waits for the lease to lapse and serves the request itself, so clients never
// see NOT_LEADER.
type Routing struct {
	Forward bool
	MaxHops int
	// RetryWait bounds each wait between attempts while an owner is unreachable.
	RetryWait time.Duration
}

type hopsKey struct{}

// WithHops records that the request in ctx was forwarded n times. Only the transport may
// call it, and only for a request from an authenticated peer: a caller cannot claim hops.
func WithHops(ctx context.Context, n int) context.Context {
	return context.WithValue(ctx, hopsKey{}, n)
}

// Hops is how many times the request in ctx has already been forwarded (0 when it came
// from a caller rather than a peer).
func Hops(ctx context.Context) int {
	n, _ := ctx.Value(hopsKey{}).(int)
	return n
}

type callerHeadersKey struct{}

// WithCallerHeaders records the headers a forward carries for a caller that did not come
// through the API's transport: the console's caller signed in once, and its session, not
// the browser's request, holds the credential the owner checks again.
func WithCallerHeaders(ctx context.Context, header func(name string) string) context.Context {
	return context.WithValue(ctx, callerHeadersKey{}, header)
}

// CallerHeader is the header name recorded by WithCallerHeaders, and false when none was.
func CallerHeader(ctx context.Context, name string) (string, bool) {
	header, ok := ctx.Value(callerHeadersKey{}).(func(string) string)
	if !ok {
		return "", false
	}
	return header(name), true
}

// route serves a request locally and, in forward mode, takes NOT_LEADER to the owner. Only
// the node a caller reached waits for an owner to become reachable or for its lease to lapse.
func route[Resp any](ctx context.Context, r Routing, local func() (Resp, error), forward func(owner string) (Resp, error)) (Resp, error) {
	for {
		resp, err := local()
		var notLeader *domain.NotLeaderError
		if !r.Forward || !errors.As(err, &notLeader) {
			return resp, err
		}
		if Hops(ctx) < r.MaxHops {
			forwarded, ferr := forward(notLeader.Owner)
			if ferr == nil || !retryableAtAnotherNode(ferr) {
				return forwarded, ferr
			}
		}
		if Hops(ctx) > 0 {
			// Forwarded here and neither served nor passed on: the answer goes back to the
			// node holding the caller, which waits and tries again within the caller's
			// deadline. Waiting here would hold up the other creates forwarded with it.
			return resp, err
		}
		wait := min(max(notLeader.RetryAfter, 50*time.Millisecond), r.RetryWait)
		select {
		case <-ctx.Done():
			var zero Resp
			return zero, &domain.UnavailableError{Reason: "the signer's lease owner could not be reached in time", RetryAfter: time.Second, Err: ctx.Err()}
		case <-time.After(wait):
		}
	}
}

// retryableAtAnotherNode: the owner moved, lost the lease, or cannot be reached.
func retryableAtAnotherNode(err error) bool {
	if errors.Is(err, domain.ErrUnavailable) {
		return true
	}
	var kerr *kerrors.Error
	return errors.As(err, &kerr) && (v1.IsNotLeader(kerr) || v1.IsFenced(kerr) || v1.IsUnavailable(kerr))
}
