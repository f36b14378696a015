// Command txm-e2e is the end-to-end check of txmanager-service against a real node: it
// builds geth (or, with -chain-client anvil, finds anvil) and the service, starts the node
// (`geth --dev`, or anvil), a second chain and the service on loopback with a fresh
// PostgreSQL database, sends signers x txs-per-signer transfers through the HTTP API,
// waits until every one is CONFIRMED, and then checks the chain itself: every transaction
// mined from its signer with the nonce the service reported, and each signer's nonces
// exactly 0..n-1.
//
//	go run ./txmanager-service/test/cmd/txm-e2e -repo .      (what `make e2e` runs)
//
// It exits non-zero on any failure. Everything it starts is stopped and removed on exit.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
)

type options struct {
	repo         string
	signers      int
	txsPerSigner int
	parallel     int
	timeout      time.Duration
	buildTimeout time.Duration
	keepLogs     string
	// chainClient is the node implementation of the run's first chain: geth or anvil.
	chainClient string
}

func main() {
	var opts options
	flag.StringVar(&opts.repo, "repo", "", "monorepo root (holds go.work and txmanager-service/); default: found from the working directory")
	flag.IntVar(&opts.signers, "signers", 5, "number of signers")
	flag.IntVar(&opts.txsPerSigner, "txs-per-signer", 100, "transactions per signer")
	flag.IntVar(&opts.parallel, "parallel", 20, "create requests in flight at once")
	flag.DurationVar(&opts.timeout, "timeout", 5*time.Minute, "limit for the run after the builds: start-up, load, confirmation, checks")
	flag.DurationVar(&opts.buildTimeout, "build-timeout", 20*time.Minute, "limit for building geth (minutes the first time) and the service")
	flag.StringVar(&opts.keepLogs, "keep-logs", "", "copy geth's and the service's logs and config into this folder")
	flag.StringVar(&opts.chainClient, "chain-client", "geth", "node implementation of the first chain: geth (--dev, built from the module proxy) or anvil (`make test-binaries` unpacks it)")
	flag.Parse()
	if opts.signers < 1 || opts.txsPerSigner < 1 || opts.parallel < 1 {
		fmt.Fprintln(os.Stderr, "txm-e2e: -signers, -txs-per-signer and -parallel must be positive")
		os.Exit(2)
	}

	// Ctrl-C cancels the run; the deferred teardown still stops everything in order.
	start := time.Now()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	rep, err := run(ctx, opts, os.Stdout)
	stop()
	printReport(os.Stdout, rep, time.Since(start))
	if err != nil {
		fmt.Fprintf(os.Stderr, "\ntxm-e2e: FAIL: %v\n", err)
		os.Exit(1)
	}
	fmt.Println("\ntxm-e2e: PASS")
}

// step prints what the run is doing, so a slow phase is visible while it happens.
func step(w io.Writer, format string, args ...any) {
	fmt.Fprintf(w, "==> "+format+"\n", args...)
}
