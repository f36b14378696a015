package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/test/e2e"
)

// The teardown undoes newest first, carries on past a failure and reports every one.
func TestTeardownOrder(t *testing.T) {
	t.Parallel()
	var ran []string
	td := &teardown{}
	step := func(name string, err error) {
		td.add(name, func() error { ran = append(ran, name); return err })
	}
	step("postgres", nil)
	step("geth", errors.New("already gone"))
	step("database", nil)
	step("service", errors.New("did not stop in 30s"))

	var out strings.Builder
	err := td.run(&out)
	if got, want := strings.Join(ran, ","), "service,database,geth,postgres"; got != want {
		t.Fatalf("ran %s, want %s", got, want)
	}
	if err == nil || !strings.Contains(err.Error(), "teardown service: did not stop") || !strings.Contains(err.Error(), "teardown geth: already gone") {
		t.Fatalf("err = %v, want both failures", err)
	}
	if strings.Count(out.String(), "teardown:") != 2 {
		t.Fatalf("printed %q, want one line per failure", out.String())
	}
	ran = nil
	if err := td.run(&out); err != nil || len(ran) != 0 {
		t.Fatalf("a second run did %v (err %v), want nothing", ran, err)
	}
}

func TestProcessWatch(t *testing.T) {
	t.Parallel()
	running, exited := make(chan struct{}), make(chan struct{})
	close(exited)
	tests := []struct {
		name  string
		watch processWatch
		want  string
	}{
		{name: "all running", watch: processWatch{"geth": running, "txmanager-service": running}},
		{name: "one exited", watch: processWatch{"geth": running, "txmanager-service": exited}, want: "txmanager-service exited"},
		// Names are checked in order, so the report does not depend on map order.
		{name: "two exited", watch: processWatch{"txm-devchain": exited, "geth": exited}, want: "geth exited"},
	}
	for _, tc := range tests {
		err := tc.watch.check()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.HasPrefix(err.Error(), tc.want)) {
			t.Errorf("%s: err = %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestStateCounts(t *testing.T) {
	t.Parallel()
	tx := func(state, sub string) *createdTx { return &createdTx{last: &v1.Tx{State: state, SubState: sub}} }
	tests := []struct {
		txs  []*createdTx
		want string
	}{
		{nil, ""},
		{[]*createdTx{tx("CONFIRMED", ""), tx("CONFIRMED", "")}, "CONFIRMED=2"},
		{[]*createdTx{tx("TRACKING", "BROADCAST"), tx("ALLOCATED", ""), tx("TRACKING", "BROADCAST"), tx("TRACKING", "")}, "ALLOCATED=1, TRACKING=1, TRACKING/BROADCAST=2"},
	}
	for _, tc := range tests {
		if got := stateCounts(tc.txs); got != tc.want {
			t.Errorf("got %q, want %q", got, tc.want)
		}
	}
}

func TestVerificationErr(t *testing.T) {
	t.Parallel()
	v := &verification{}
	if err := v.err(); err != nil {
		t.Fatalf("no problems: %v", err)
	}
	for i := range 12 {
		v.problem("tx %d: wrong nonce", i)
	}
	err := v.err()
	if err == nil || !strings.HasPrefix(err.Error(), "12 check(s) failed (first 10 shown):") ||
		!strings.Contains(err.Error(), "tx 9: wrong nonce") || strings.Contains(err.Error(), "tx 10:") {
		t.Fatalf("err = %v, want 12 counted and the first 10 shown", err)
	}
}

// The summary has a row per chain and signer, the lanes' totals, and marks a lane whose
// nonces are not 0..n-1.
func TestPrintTable(t *testing.T) {
	t.Parallel()
	signers := []common.Address{common.HexToAddress("0xa1"), common.HexToAddress("0xb2")}
	rep := &report{
		chains:    []*runChain{{id: 1337, name: "geth --dev"}, {id: 31337, name: "txm-devchain"}},
		signers:   signers,
		perSigner: 3,
		txs:       make([]*createdTx, 12),
	}
	lane := func(nonces ...uint64) signerResult {
		return signerResult{created: 3, confirmed: 3, broadcasts: 3, chainNonce: 3, nonces: e2e.CheckNonces(nonces, 3), onChain: 3, completions: 3}
	}
	v := &verification{lanes: []signerResult{lane(0, 1, 2), lane(0, 1, 2), lane(0, 1, 2), lane(0, 1, 1)}, completions: 12}

	var out strings.Builder
	printTable(&out, rep, v)
	lines := strings.Split(out.String(), "\n")
	if len(lines) < 6 {
		t.Fatalf("output:\n%s", out.String())
	}
	for i, want := range []struct{ chain, signer, nonces string }{
		{"1337 (geth --dev)", signers[0].Hex(), "ok"},
		{"1337 (geth --dev)", signers[1].Hex(), "ok"},
		{"31337 (txm-devchain)", signers[0].Hex(), "ok"},
		{"31337 (txm-devchain)", signers[1].Hex(), "FAIL"},
	} {
		fields := strings.Fields(lines[1+i])
		if !strings.Contains(lines[1+i], want.chain) {
			t.Errorf("row %d: %q, want chain %s", i, lines[1+i], want.chain)
		}
		if !strings.Contains(lines[1+i], want.signer) || fields[len(fields)-3] != want.nonces {
			t.Errorf("row %d: %q, want signer %s and nonces %s", i, lines[1+i], want.signer, want.nonces)
		}
	}
	total := strings.Fields(lines[5])
	if total[0] != "total" || strings.Join(total[1:5], " ") != "(2 chains x 2" || total[6] != "12" || total[7] != "12" || total[10] != "11" {
		t.Errorf("totals line %q, want 2 chains x 2 signers, 12 created and confirmed, 11 distinct nonces", lines[5])
	}
	if !strings.Contains(out.String(), "completion feed:        12 entries for 12 transactions") {
		t.Errorf("output lacks the feed line:\n%s", out.String())
	}
}

func TestPrintReport(t *testing.T) {
	t.Parallel()
	rep := &report{node: "geth Version: 1.17.8-stable", confirmations: 2, txs: make([]*createdTx, 500),
		timings: timings{createAll: 1234 * time.Millisecond, createToConfirmed: 9876 * time.Millisecond}}
	var out strings.Builder
	printReport(&out, rep, 61*time.Second)
	for _, want := range []string{
		"first chain's node:     geth Version: 1.17.8-stable (1s blocks); service confirmations.required: 2",
		"create -> all CONFIRMED: 9.88s (the 500 creates were answered within 1.234s)",
		"wall time:              1m1s",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	// What the run did not get to is left out rather than printed as zero.
	if strings.Contains(out.String(), "builds:") || strings.Contains(out.String(), "chain ") {
		t.Errorf("report prints what was not measured:\n%s", out.String())
	}
}
