package signer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"github.com/aws/smithy-go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A key source that did not answer for now is told apart from one that answered no: an
// operator adding a signer meanwhile is asked to try again (503), not told the key is wrong.
func TestUnreachableKeySourcesAreToldApart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"a deadline", fmt.Errorf("get public key: %w", context.DeadlineExceeded), true},
		{"a refused connection", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, true},
		{"AWS throttling", &smithy.GenericAPIError{Code: "ThrottlingException"}, true},
		{"AWS's own fault", &smithy.GenericAPIError{Code: "KMSInternalException"}, true},
		{"Google unavailable", status.Error(codes.Unavailable, "try later"), true},
		{"AWS: no such key", &smithy.GenericAPIError{Code: "NotFoundException"}, false},
		{"AWS: access denied", &smithy.GenericAPIError{Code: "AccessDeniedException"}, false},
		{"Google: no such key", status.Error(codes.NotFound, "no key"), false},
		{"not a secp256k1 key", ErrNotSecp256k1, false},
	}
	for _, tt := range tests {
		if got := unreachable(tt.err); got != tt.want {
			t.Errorf("%s: unreachable %t, want %t", tt.name, got, tt.want)
		}
	}
}
