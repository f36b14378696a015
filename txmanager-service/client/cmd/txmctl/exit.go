package main

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	txmclient "github.com/bionicotaku/txmanager-service/client"
)

// Exit codes: what happened, for scripts.
const (
	exitOK = 0
	// exitFailed: an unexpected error (the service's INTERNAL among them).
	exitFailed = 1
	// exitUsage: the command line is wrong (unknown flag, missing argument).
	exitUsage = 2
	// exitNotFound: no such transaction, or nothing quarantined to release.
	exitNotFound = 3
	// exitRefused: the service refused the request as it stands (INVALID_ARGUMENT,
	// IDEMPOTENCY_CONFLICT, UNKNOWN_SIGNER, SIGNER_QUARANTINED, CURSOR_EXPIRED, ...):
	// sending it again will not help.
	exitRefused = 4
	// exitNotAllowed: credentials missing or not granted (UNAUTHENTICATED,
	// PERMISSION_DENIED, APPROVAL_FORBIDDEN).
	exitNotAllowed = 5
	// exitUnavailable: the service could not be reached or could not serve after the
	// client's retries (UNAVAILABLE, NOT_LEADER, ...): try again later.
	exitUnavailable = 6
	// exitTimedOut: --timeout passed first (tx wait: the transaction is not final yet).
	exitTimedOut = 7
	// exitTxFailed: tx wait: the transaction ended FAILED_FINAL, or the intent ended without
	// a nonce (EXPIRED, REJECTED, REFUSED).
	exitTxFailed = 8
	// exitAuditBroken: audit verify: a record of the trail was edited or removed.
	exitAuditBroken = 9
	// exitInterrupted: an interrupt (Ctrl-C) or SIGTERM ended the command, as shells
	// report a command SIGINT ended (128 + 2): the usual way to stop feed tail or tx wait.
	exitInterrupted = 130
)

// usageError is a wrong command line.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// quietError carries an exit code for an outcome the command already printed.
type quietError struct {
	code int
}

func (e *quietError) Error() string { return "" }

// exitCodeOf maps an error to its exit code.
func exitCodeOf(err error) int {
	var usage *usageError
	var quiet *quietError
	switch {
	case errors.As(err, &quiet):
		return quiet.code
	case errors.As(err, &usage), isCobraUsage(err):
		return exitUsage
	case errors.Is(err, context.DeadlineExceeded):
		// The command's own deadline (the client joins it to the call's error).
		return exitTimedOut
	case errors.Is(err, context.Canceled):
		return exitInterrupted
	case status.Code(err) == codes.DeadlineExceeded:
		// Each attempt ran out of its call timeout while the command's deadline had not:
		// the service did not answer in time, which sending again may change.
		return exitUnavailable
	case v1.IsNotFound(err):
		return exitNotFound
	case v1.IsUnauthenticated(err), v1.IsPermissionDenied(err), v1.IsApprovalForbidden(err):
		return exitNotAllowed
	case v1.IsInternal(err):
		return exitFailed
	}
	if again, _ := txmclient.Retryable(err); again {
		return exitUnavailable
	}
	if reason := reasonOf(err); reason != "" {
		return exitRefused
	}
	return exitFailed
}
