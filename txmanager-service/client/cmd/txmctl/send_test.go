package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/client/internal/servicetest"
)

// tx send: a CSV file's creates in batches, each line answered; a line refused alone; the
// file sent again replays; --wait waits for every one.
func TestSendACSVFile(t *testing.T) {
	prefix := fmt.Sprintf("csv-%d", time.Now().UnixNano())
	var b strings.Builder
	b.WriteString("signer,requestId,to,value,gasLimit\n")
	for i := range 30 {
		to := servicetest.Recipient
		if i == 7 {
			to = "0x1234" // refused alone
		}
		fmt.Fprintf(&b, "%s,%s-%d,%s,%d,21000\n", servicetest.DevSigner, prefix, i, to, i+1)
	}
	file := filepath.Join(t.TempDir(), "payouts.csv")
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := txmctl(t, service.APIKey, "tx", "send", "--file", file, "--wait")
	if code != exitRefused || !strings.Contains(stdout, "30 lines: 29 accepted, 1 refused, 0 not sent") || !strings.Contains(stdout, "final: 29 confirmed, 0 not") {
		t.Fatalf("tx send: exit %d, want %d\nstdout: %s\nstderr: %s", code, exitRefused, stdout, stderr)
	}
	if !regexp.MustCompile(`(?m)^9\s+` + prefix + `-7\s+refused\s.*INVALID_ARGUMENT: to`).MatchString(stdout) {
		t.Fatalf("tx send does not name line 9's refusal:\n%s", stdout)
	}
	code, stdout, _ = txmctl(t, service.APIKey, "tx", "send", "--file", file)
	if code != exitRefused || strings.Count(stdout, "replayed") != 29 {
		t.Fatalf("the file sent again: exit %d, want 29 replays:\n%s", code, stdout)
	}

	for _, tc := range []struct {
		name, contents, want string
	}{
		{"no header", "", "empty"},
		{"an unknown column", "signer,requestId,amount\n", `unknown column "amount"`},
		{"no requestId column", "signer,to\nx,y\n", "requestId is required"},
		{"a line without a requestId", "signer,requestId\n" + servicetest.DevSigner + ",\n", "line 2: signer and requestId are required"},
		{"a bad gas limit", "signer,requestId,gasLimit\n" + servicetest.DevSigner + ",r,lots\n", `line 2: gasLimit "lots"`},
		{"only a header", "signer,requestId\n", "no creates"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bad := filepath.Join(t.TempDir(), "bad.csv")
			if err := os.WriteFile(bad, []byte(tc.contents), 0o600); err != nil {
				t.Fatal(err)
			}
			code, _, stderr := txmctl(t, service.APIKey, "tx", "send", "--file", bad)
			if code != exitUsage || !strings.Contains(stderr, tc.want) {
				t.Fatalf("exit %d, stderr %q; want %d naming %q", code, stderr, exitUsage, tc.want)
			}
		})
	}
}

// A send file's lines are named as an editor numbers them: blank lines and a quoted cell
// spanning lines count, and a spreadsheet's byte order mark before the header is no column.
func TestReadSendFileNumbersLinesAsWritten(t *testing.T) {
	signer := servicetest.DevSigner
	tests := []struct {
		name      string
		contents  string
		wantLines []int
		wantErr   string
	}{
		{"plain", "signer,requestId\n" + signer + ",a\n" + signer + ",b\n", []int{2, 3}, ""},
		{"blank lines", "signer,requestId\n\n" + signer + ",a\n\n\n" + signer + ",b\n", []int{3, 6}, ""},
		{"a quoted cell over two lines", "signer,requestId,data\n" + signer + ",a,\"0x\n\"\n" + signer + ",b,0x\n", []int{2, 4}, ""},
		{"a byte order mark", "\ufeffsigner,requestId\n" + signer + ",a\n", []int{2}, ""},
		{"a byte order mark before a quoted header", "\ufeff\"signer\",\"requestId\"\n" + signer + ",a\n", []int{2}, ""},
		{"a refusal after blank lines", "signer,requestId,gasLimit\n\n\n" + signer + ",a,lots\n", nil, `line 4: gasLimit "lots"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reqs, lines, err := readSendFile(strings.NewReader(tc.contents), 0)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || len(reqs) != len(tc.wantLines) || fmt.Sprint(lines) != fmt.Sprint(tc.wantLines) {
				t.Fatalf("%d creates on lines %v (%v), want lines %v", len(reqs), lines, err, tc.wantLines)
			}
			if reqs[0].GetSigner() != signer || reqs[0].GetRequestId() != "a" {
				t.Fatalf("first create %v", reqs[0])
			}
		})
	}
}

// serveTx runs a fake TxService on a loopback port for the test and returns its address.
func serveTx(t *testing.T, fake v1.TxServiceServer) string {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	server := grpc.NewServer()
	v1.RegisterTxServiceServer(server, fake)
	go func() { _ = server.Serve(listener) }()
	t.Cleanup(server.Stop)
	return listener.Addr().String()
}

// lostCommits answers every create of a batch OUTCOME_UNKNOWN, as a service whose database
// lost the commit does: each line may or may not have been created.
type lostCommits struct {
	v1.UnimplementedTxServiceServer
}

func (lostCommits) CreateTxBatch(_ context.Context, r *v1.CreateTxBatchRequest) (*v1.CreateTxBatchResponse, error) {
	out := &v1.CreateTxBatchResponse{}
	for range r.GetCreates() {
		out.Results = append(out.Results, &v1.CreateTxResult{Result: &v1.CreateTxResult_Error{Error: &v1.CreateTxError{
			HttpStatus: 503, Reason: "OUTCOME_UNKNOWN", Message: "the commit's outcome is unknown", Metadata: map[string]string{"retry_after_seconds": "1"}}}})
	}
	return out, nil
}

// A line still answered with a retryable refusal after every attempt is not reported as
// refused: it is "not sent, send again", and the exit code says to send the file again.
func TestSendReportsLinesToSendAgain(t *testing.T) {
	addr := serveTx(t, lostCommits{})
	file := filepath.Join(t.TempDir(), "payouts.csv")
	if err := os.WriteFile(file, []byte("signer,requestId,to,value\n"+servicetest.DevSigner+",again-1,"+servicetest.Recipient+",1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"--addr", addr, "--timeout", "20s", "tx", "send", "--file", file}, &stdout, &stderr)
	if code != exitUnavailable || !strings.Contains(stdout.String(), "not sent, send again") || !strings.Contains(stdout.String(), "1 lines: 0 accepted, 0 refused, 1 not sent") {
		t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, exitUnavailable, stdout.String(), stderr.String())
	}
}

// neverAnswers holds every batch until its caller gives up, as a service stuck behind a
// lock or a network that dropped the answer does.
type neverAnswers struct {
	v1.UnimplementedTxServiceServer
}

func (neverAnswers) CreateTxBatch(ctx context.Context, _ *v1.CreateTxBatchRequest) (*v1.CreateTxBatchResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// A line whose call was in flight when --timeout passed is not reported as refused: it may
// have been created, so it is "not known, send again", and the exit code is the timeout's.
func TestSendReportsLinesCutShortAsNotKnown(t *testing.T) {
	addr := serveTx(t, neverAnswers{})
	file := filepath.Join(t.TempDir(), "payouts.csv")
	lines := "signer,requestId,to,value\n" + servicetest.DevSigner + ",cut-1," + servicetest.Recipient + ",1\n" +
		servicetest.DevSigner + ",cut-2," + servicetest.Recipient + ",1\n"
	if err := os.WriteFile(file, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"--addr", addr, "--timeout", "1s", "tx", "send", "--file", file}, &stdout, &stderr)
	out := stdout.String()
	if code != exitTimedOut || strings.Count(out, "not known, send again") != 2 || !strings.Contains(out, "2 lines: 0 accepted, 0 refused, 2 not sent") {
		t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, exitTimedOut, out, stderr.String())
	}
}

// mixedOutcomes answers each line of a batch by its request id's prefix: "ok" created,
// "bad" refused for good, "later" refused for now (OUTCOME_UNKNOWN); every transaction it
// created ends FAILED_FINAL.
type mixedOutcomes struct {
	v1.UnimplementedTxServiceServer
}

func (mixedOutcomes) CreateTxBatch(_ context.Context, r *v1.CreateTxBatchRequest) (*v1.CreateTxBatchResponse, error) {
	out := &v1.CreateTxBatchResponse{}
	for _, c := range r.GetCreates() {
		var result *v1.CreateTxResult
		switch id := c.GetRequestId(); {
		case strings.HasPrefix(id, "ok"):
			result = &v1.CreateTxResult{Result: &v1.CreateTxResult_Response{Response: &v1.CreateTxResponse{Created: true,
				Tx: &v1.Tx{TxId: "tx-" + id, RequestId: id, State: "ALLOCATED"}}}}
		case strings.HasPrefix(id, "bad"):
			result = &v1.CreateTxResult{Result: &v1.CreateTxResult_Error{Error: &v1.CreateTxError{HttpStatus: 400, Reason: "INVALID_ARGUMENT", Message: "value: not a number"}}}
		default:
			result = &v1.CreateTxResult{Result: &v1.CreateTxResult_Error{Error: &v1.CreateTxError{
				HttpStatus: 503, Reason: "OUTCOME_UNKNOWN", Message: "the commit's outcome is unknown", Metadata: map[string]string{"retry_after_seconds": "1"}}}}
		}
		out.Results = append(out.Results, result)
	}
	return out, nil
}

func (mixedOutcomes) GetTx(_ context.Context, r *v1.GetTxRequest) (*v1.Tx, error) {
	return &v1.Tx{TxId: r.GetTxId(), State: "FAILED_FINAL"}, nil
}

// With --wait, lines not sent and lines refused decide the exit code before transactions
// that failed on chain: sending the file again is what the first need, and the table says
// which lines failed on chain. Failed on chain alone exits 8.
func TestSendWaitExitsForTheLinesLeftFirst(t *testing.T) {
	addr := serveTx(t, mixedOutcomes{})
	for _, tc := range []struct {
		name     string
		requests []string
		want     int
	}{
		{"failed on chain alone", []string{"ok-1"}, exitTxFailed},
		{"failed on chain and refused", []string{"ok-1", "bad-1"}, exitRefused},
		{"failed on chain and not sent", []string{"ok-1", "later-1"}, exitUnavailable},
		{"all three", []string{"ok-1", "bad-1", "later-1"}, exitUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := "signer,requestId,to,value\n"
			for _, id := range tc.requests {
				body += servicetest.DevSigner + "," + id + "," + servicetest.Recipient + ",1\n"
			}
			file := filepath.Join(t.TempDir(), "payouts.csv")
			if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), []string{"--addr", addr, "--timeout", "30s", "tx", "send", "--wait", "--file", file}, &stdout, &stderr)
			if code != tc.want || !strings.Contains(stdout.String(), "final: 0 confirmed, 1 not") {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.want, stdout.String(), stderr.String())
			}
			// The line that failed on chain is named with its final state.
			if !regexp.MustCompile(`(?m)^2\s+ok-1\s+tx-ok-1\s+FAILED_FINAL`).MatchString(stdout.String()) {
				t.Fatalf("the output does not say line 2 ended FAILED_FINAL:\n%s", stdout.String())
			}
		})
	}
}

// With --json, send prints one JSON object a line, for a script: each line's result, and
// with --wait each accepted line again with its final state.
func TestSendPrintsJSONLines(t *testing.T) {
	addr := serveTx(t, mixedOutcomes{})
	body := "signer,requestId,to,value\n"
	for _, id := range []string{"ok-1", "bad-1", "later-1"} {
		body += servicetest.DevSigner + "," + id + "," + servicetest.Recipient + ",1\n"
	}
	file := filepath.Join(t.TempDir(), "payouts.csv")
	if err := os.WriteFile(file, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"--addr", addr, "--timeout", "30s", "--json", "tx", "send", "--wait", "--file", file}, &stdout, &stderr)
	if code != exitUnavailable {
		t.Fatalf("exit %d, want %d\nstderr: %s", code, exitUnavailable, stderr.String())
	}
	var got []string
	for _, raw := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		var line struct {
			Phase     string `json:"phase"`
			Line      int    `json:"line"`
			RequestID string `json:"requestId"`
			Result    string `json:"result"`
			SendAgain bool   `json:"sendAgain"`
			Reason    string `json:"reason"`
			Final     string `json:"final"`
		}
		if err := json.Unmarshal([]byte(raw), &line); err != nil {
			t.Fatalf("not a JSON object a line: %q: %v\n%s", raw, err, stdout.String())
		}
		got = append(got, fmt.Sprintf("%s %d %s %s %t %s %s", line.Phase, line.Line, line.RequestID, line.Result, line.SendAgain, line.Reason, line.Final))
	}
	want := []string{"answered 2 ok-1 created false  ", "answered 3 bad-1 refused false INVALID_ARGUMENT ", "answered 4 later-1 not sent, send again true OUTCOME_UNKNOWN ",
		"final 2 ok-1 created false  FAILED_FINAL"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
