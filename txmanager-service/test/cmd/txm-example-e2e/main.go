// Command txm-example-e2e is the end-to-end check of the payouts example
// (examples/payouts): the outbox, the relay and the exactly-once consumer against the real
// txmanager-service, with crashes. It builds txmanager-service, txm-devchain and the
// payouts binary, starts them on loopback (port 0 each) with fresh PostgreSQL databases,
// creates payouts over the example's HTTP API, SIGKILLs the example once while its relay
// is sending and once while its consumer is applying completions, SIGKILLs txmanager once
// (restarted on the same database), waits until every payout is final and prints a table
// of invariants. It exits non-zero if any fails.
//
//	go run ./txmanager-service/test/cmd/txm-example-e2e      (what `make example-e2e` runs)
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

type options struct {
	repo     string
	payouts  int
	parallel int
	rate     int
	timeout  time.Duration
	keep     bool
}

func main() {
	var o options
	flag.StringVar(&o.repo, "repo", "", "monorepo root (go.work, txmanager-service/, examples/payouts/); default: found from the working directory")
	flag.IntVar(&o.payouts, "payouts", 300, "payouts to create")
	flag.IntVar(&o.parallel, "parallel", 8, "create requests in flight at once")
	flag.IntVar(&o.rate, "rate", 50, "creates per second (spread over the faults)")
	flag.DurationVar(&o.timeout, "timeout", 4*time.Minute, "limit for the whole run after the builds")
	flag.BoolVar(&o.keep, "keep", false, "keep the work folder (logs, configs) and print its path")
	flag.Parse()
	if o.payouts < 10 || o.parallel < 1 || o.rate < 1 {
		fmt.Fprintln(os.Stderr, "txm-example-e2e: -payouts must be at least 10, -parallel and -rate positive")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	started := time.Now()
	rows, err := run(ctx, o)
	stop()
	ok := printTable(rows)
	fmt.Printf("\nwall time %s\n", time.Since(started).Round(time.Second))
	if err != nil {
		fmt.Fprintf(os.Stderr, "txm-example-e2e: FAIL: %v\n", err)
		os.Exit(1)
	}
	if !ok {
		fmt.Fprintln(os.Stderr, "txm-example-e2e: FAIL: an invariant does not hold")
		os.Exit(1)
	}
	fmt.Println("txm-example-e2e: PASS")
}

// row is one invariant: its value and what it must be.
type row struct {
	name string
	got  int
	want string
	ok   bool
}

func printTable(rows []row) bool {
	if len(rows) == 0 {
		return false
	}
	all := true
	fmt.Printf("\n%-58s %8s  %-10s %s\n", "payouts example (outbox, relay, inbox) under SIGKILL", "value", "must be", "")
	for _, r := range rows {
		mark := "ok"
		if !r.ok {
			mark, all = "FAIL", false
		}
		fmt.Printf("%-58s %8d  %-10s %s\n", r.name, r.got, r.want, mark)
	}
	return all
}

func step(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }
