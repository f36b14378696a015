package controllers

import (
	"context"
	"errors"
	"testing"
	"time"

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
