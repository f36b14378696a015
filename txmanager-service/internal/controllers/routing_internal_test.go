package controllers

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-kratos/kratos/v2/log"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/domain"
)

func TestRouteWaitsOnlyWhereTheCallerIs(t *testing.T) {
	forwardMode := Routing{Forward: true, MaxHops: 1, RetryWait: 20 * time.Millisecond}
	tests := []struct {
		name string
		hops int
		// notLeaderFor is how many local attempts answer NOT_LEADER before one succeeds.
		notLeaderFor int
		wantLocal    int
		wantErr      bool
	}{
		{name: "a caller's request waits and is served once the lease is free", hops: 0, notLeaderFor: 2, wantLocal: 3},
		{name: "a forwarded request goes back at once to the node that forwarded it", hops: 1, notLeaderFor: 2, wantLocal: 1, wantErr: true},
		{name: "a forwarded request the owner serves is answered", hops: 1, notLeaderFor: 0, wantLocal: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(WithHops(context.Background(), tt.hops), 5*time.Second)
			defer cancel()
			local := 0
			_, err := route(ctx, forwardMode,
				func() (string, error) {
					local++
					if local <= tt.notLeaderFor {
						return "", &domain.NotLeaderError{Signer: "0xaa", Owner: "node-b"}
					}
					return "created", nil
				},
				// The owner the caller's node forwards to cannot be reached.
				func(string) (string, error) { return "", &domain.UnavailableError{Reason: "owner unreachable"} })
			var notLeader *domain.NotLeaderError
			switch {
			case tt.wantErr && !errors.As(err, &notLeader):
				t.Fatalf("error %v, want NOT_LEADER back to the forwarding node", err)
			case !tt.wantErr && err != nil:
				t.Fatalf("error %v, want the request served", err)
			case local != tt.wantLocal:
				t.Fatalf("%d local attempts, want %d", local, tt.wantLocal)
			}
		})
	}
}

// What the owner answers decides whether the caller's node tries again: an owner that
// moved, lost the lease or cannot be reached is worth waiting for; a refusal of the
// request itself is the caller's answer. Basic mode never forwards, and a request that
// has used its hops is not forwarded again.
func TestRouteForwardsAndRetriesOnlyWhatAnotherNodeCouldServe(t *testing.T) {
	t.Parallel()
	refused := v1.ErrorInvalidArgument("value: not a number")
	tests := []struct {
		name    string
		routing Routing
		hops    int
		// ownerAnswers are the forward's answers in turn (nil: served).
		ownerAnswers []error
		wantForwards int
		wantLocal    int
		wantErr      error
	}{
		{name: "basic mode answers NOT_LEADER without forwarding", routing: Routing{MaxHops: 1},
			wantLocal: 1, wantErr: domain.ErrNotLeader},
		{name: "the owner's refusal is the answer", routing: Routing{Forward: true, MaxHops: 1, RetryWait: time.Millisecond},
			ownerAnswers: []error{refused}, wantForwards: 1, wantLocal: 1, wantErr: refused},
		{name: "an owner that lost its lease on the wire is tried again", routing: Routing{Forward: true, MaxHops: 1, RetryWait: time.Millisecond},
			ownerAnswers: []error{v1.ErrorFenced("lease lost"), nil}, wantForwards: 2, wantLocal: 2},
		{name: "an owner that moved on the wire is tried again", routing: Routing{Forward: true, MaxHops: 1, RetryWait: time.Millisecond},
			ownerAnswers: []error{v1.ErrorNotLeader("moved"), v1.ErrorUnavailable("busy"), nil}, wantForwards: 3, wantLocal: 3},
		{name: "a request that used its hops is not forwarded again", routing: Routing{Forward: true, MaxHops: 1, RetryWait: time.Millisecond}, hops: 1,
			wantLocal: 1, wantErr: domain.ErrNotLeader},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(WithHops(context.Background(), tt.hops), 5*time.Second)
			defer cancel()
			local, forwards := 0, 0
			_, err := route(ctx, tt.routing,
				func() (string, error) {
					local++
					return "", &domain.NotLeaderError{Signer: "0xaa", Owner: "node-b"}
				},
				func(owner string) (string, error) {
					if owner != "node-b" {
						t.Errorf("forwarded to %q, want the owner node-b", owner)
					}
					answer := tt.ownerAnswers[forwards]
					forwards++
					return "served", answer
				})
			if !errors.Is(err, tt.wantErr) || (tt.wantErr == nil && err != nil) {
				t.Fatalf("error %v, want %v", err, tt.wantErr)
			}
			if local != tt.wantLocal || forwards != tt.wantForwards {
				t.Fatalf("%d local attempts and %d forwards, want %d and %d", local, forwards, tt.wantLocal, tt.wantForwards)
			}
		})
	}
}

// ownerThatFails forwards nothing: it answers every create with err.
type ownerThatFails struct{ err error }

func (o ownerThatFails) ForwardCreate(context.Context, string, *v1.CreateTxRequest) (*v1.CreateTxResponse, error) {
	return nil, o.err
}

func (o ownerThatFails) ForwardResolve(context.Context, string, *v1.ResolveTxRequest) (*v1.ResolveTxResponse, error) {
	return nil, o.err
}

// A create forwarded to the signer's owner that got there and was not answered is made
// again here only when its requestId makes the second one a replay; one without is answered
// OUTCOME_UNKNOWN, never made twice. A create that never reached the owner is served here
// once the lease is free, with a requestId or without.
func TestUnansweredForwardIsRetriedOnlyWithARequestID(t *testing.T) {
	t.Parallel()
	sentUnanswered := &domain.UnavailableError{Reason: "lease owner did not answer", Err: domain.ErrSentUnanswered}
	neverSent := &domain.UnavailableError{Reason: "lease owner unreachable"}
	tests := []struct {
		name        string
		requestID   string
		ownerErr    error
		wantCreates int
		wantUnknown bool
	}{
		{"without a requestId, sent and unanswered", "", sentUnanswered, 0, true},
		{"with a requestId, sent and unanswered", "r-1", sentUnanswered, 1, false},
		{"without a requestId, never sent", "", neverSent, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			req := &v1.CreateTxRequest{Signer: "0xaa", RequestId: tt.requestID}
			local, creates := 0, 0
			_, err := route(ctx, Routing{Forward: true, MaxHops: 1, RetryWait: time.Millisecond},
				func() (*v1.CreateTxResponse, error) {
					local++
					if local == 1 {
						return nil, &domain.NotLeaderError{Signer: "0xaa", Owner: "node-b"}
					}
					creates++ // the lease lapsed: this node makes it
					return &v1.CreateTxResponse{Created: true}, nil
				},
				func(owner string) (*v1.CreateTxResponse, error) {
					return forwardCreate(ctx, ownerThatFails{tt.ownerErr}, owner, req)
				})
			if creates != tt.wantCreates {
				t.Fatalf("made here %d times, want %d", creates, tt.wantCreates)
			}
			if unknown := errors.Is(err, domain.ErrOutcomeUnknown); unknown != tt.wantUnknown || (!tt.wantUnknown && err != nil) {
				t.Fatalf("error %v, want outcome unknown %v", err, tt.wantUnknown)
			}
			if tt.wantUnknown {
				if api := ToAPIError(log.NewHelper(log.DefaultLogger), err); !v1.IsOutcomeUnknown(api) {
					t.Fatalf("API error %v, want OUTCOME_UNKNOWN", api)
				}
			}
		})
	}
}
