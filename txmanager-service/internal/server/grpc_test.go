package server

import (
	"context"
	"net/http"
	"testing"

	kerrors "github.com/go-kratos/kratos/v2/errors"
	httpstatus "github.com/go-kratos/kratos/v2/transport/http/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// An API error a lease owner returns over gRPC reaches the forwarding node's client with
// the same status and reason.
func TestAPIErrorsSurviveForwarding(t *testing.T) {
	tests := []struct {
		code   int
		reason string
	}{
		{http.StatusBadRequest, "INVALID_ARGUMENT"},
		{http.StatusUnauthorized, "UNAUTHENTICATED"},
		{http.StatusForbidden, "PERMISSION_DENIED"},
		{http.StatusNotFound, "NOT_FOUND"},
		{http.StatusConflict, "IDEMPOTENCY_CONFLICT"},
		{http.StatusUnprocessableEntity, "INTENT_REVERTS"},
		{httpstatus.ClientClosed, "UNAVAILABLE"},
		{http.StatusServiceUnavailable, "UNAVAILABLE"},
	}
	for _, tc := range tests {
		t.Run(tc.reason, func(t *testing.T) {
			sent := kerrors.New(tc.code, tc.reason, "details")
			_, err := grpcStatusInterceptor(context.Background(), nil, &grpc.UnaryServerInfo{},
				func(context.Context, any) (any, error) { return nil, sent })
			onTheWire := status.Convert(err).Err()
			got := kerrors.FromError(fromPeer(onTheWire))
			if int(got.Code) != tc.code || got.Reason != tc.reason {
				t.Errorf("forwarded %d %s arrived as %d %s", tc.code, tc.reason, got.Code, got.Reason)
			}
		})
	}
}
