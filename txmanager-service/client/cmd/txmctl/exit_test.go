package main

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
)

// Every outcome a command can end with maps to the exit code its help promises.
func TestExitCodes(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"a wrong command line", &usageError{"want a transaction id"}, exitUsage},
		{"cobra's unknown command", errors.New(`unknown command "tz" for "txmctl"`), exitUsage},
		{"cobra's missing required flag", errors.New(`required flag(s) "note" not set`), exitUsage},
		{"no such transaction", v1.ErrorNotFound("transaction not found"), exitNotFound},
		{"refused: invalid argument", v1.ErrorInvalidArgument("signer: not an address"), exitRefused},
		{"refused: quarantined", v1.ErrorSignerQuarantined("held"), exitRefused},
		{"refused: cursor expired", v1.ErrorCursorExpired("gone"), exitRefused},
		{"no credentials", v1.ErrorUnauthenticated("credentials required"), exitNotAllowed},
		{"no admin grant", v1.ErrorPermissionDenied("no admin"), exitNotAllowed},
		{"unavailable after the retries", v1.ErrorUnavailable("no endpoint"), exitUnavailable},
		{"unreachable", status.Error(codes.Unavailable, "connection refused"), exitUnavailable},
		{"--timeout passed", fmt.Errorf("wait: %w", context.DeadlineExceeded), exitTimedOut},
		{"interrupted (Ctrl-C)", errors.Join(status.Error(codes.Canceled, "context canceled"), context.Canceled), exitInterrupted},
		{"the service cut the call at the command's deadline", errors.Join(status.Error(codes.DeadlineExceeded, "stream terminated"), context.DeadlineExceeded), exitTimedOut},
		{"every attempt ran out of its call timeout, the command's deadline not", status.Error(codes.DeadlineExceeded, "context deadline exceeded"), exitUnavailable},
		{"the transaction failed", &quietError{code: exitTxFailed}, exitTxFailed},
		{"internal", v1.ErrorInternal("internal error"), exitFailed},
		{"anything else", errors.New("disk full"), exitFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := exitCodeOf(tt.err); got != tt.want {
				t.Fatalf("exit %d, want %d", got, tt.want)
			}
		})
	}
}
