// Command txmctl is txmanager-service's command line for callers and operators, built on
// the Go client (gRPC): transactions, the completions feed, signers, quarantines, stuck
// transactions and nodes. Tables for people, --json for scripts.
//
//	txmctl --addr 127.0.0.1:9090 tx wait --signer 0x... --request-id hello-1
//	txmctl signers
//	txmctl quarantine list --json
//
// Exit codes say what happened (see exitCodes): 0 done, 1 failed, 2 usage, 3 not found,
// 4 refused, 5 not allowed, 6 unavailable, 7 timed out, 8 the transaction failed, 9 the
// audit trail is broken, 130 interrupted.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	kerrors "github.com/go-kratos/kratos/v2/errors"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command line and returns its exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCommand(stdout)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	code := exitCodeOf(err)
	var quiet *quietError
	if !errors.As(err, &quiet) {
		fmt.Fprintln(stderr, "txmctl:", describe(err))
	}
	return code
}

// describe is an error as an operator reads it: the service's reason and message, or what
// went wrong on the way.
func describe(err error) string {
	switch se := kerrors.FromError(err); {
	case errors.Is(err, context.DeadlineExceeded):
		return "timed out (--timeout)"
	case errors.Is(err, context.Canceled):
		return "interrupted"
	case se.Reason != "":
		return se.Reason + ": " + se.Message
	}
	return err.Error()
}
