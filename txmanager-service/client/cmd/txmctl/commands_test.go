package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	txmclient "github.com/bionicotaku/txmanager-service/client"
	"github.com/bionicotaku/txmanager-service/client/internal/servicetest"
)

// One real txmanager-service (TLS, API keys, the embedded chain, a database of its own) for
// the commands to talk to.
var service *servicetest.Service

func TestMain(m *testing.M) {
	var err error
	service, err = servicetest.Start("txmctl")
	if err != nil {
		if errors.Is(err, servicetest.ErrNoDatabase) && os.Getenv(servicetest.EnvSkip) == "1" {
			fmt.Printf("%s=1: txmctl's tests need a real service and did not run: %v\n", servicetest.EnvSkip, err)
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "txmctl tests: start txmanager-service:", err)
		os.Exit(1)
	}
	code := m.Run()
	if err := service.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "txmctl tests: stop txmanager-service:", err)
		code = max(code, 1)
	}
	os.Exit(code)
}

// txmctl runs one command line in this process against the service, with key (none when
// empty), and returns its exit code and output.
func txmctl(t *testing.T, key string, args ...string) (int, string, string) {
	t.Helper()
	flags := []string{"--addr", service.GRPCAddr, "--ca-file", service.CAFile, "--timeout", "20s"}
	if key != "" {
		flags = append(flags, "--api-key", key)
	}
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), append(flags, args...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// createTransfer sends one transfer through the Go client and returns its id.
func createTransfer(t *testing.T, requestID string) string {
	t.Helper()
	created, err := tryTransfer(t, requestID, "1")
	if err != nil {
		t.Fatal(err)
	}
	return created.GetTx().GetTxId()
}

// callerClient is a Go client of the service with the caller's key, closed when the test
// ends.
func callerClient(t *testing.T) *txmclient.Client {
	t.Helper()
	pem, err := os.ReadFile(service.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	client, closeClient, err := txmclient.New(t.Context(), txmclient.Config{Endpoints: []string{service.GRPCAddr}, APIKey: service.APIKey,
		TLS: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeClient)
	return client
}

// tryTransfer sends one transfer of value wei with the caller's key and answers the service.
func tryTransfer(t *testing.T, requestID, value string) (*v1.CreateTxResponse, error) {
	t.Helper()
	return callerClient(t).Create(t.Context(), &v1.CreateTxRequest{Signer: servicetest.DevSigner, To: servicetest.Recipient, Value: value, GasLimit: 21000, RequestId: requestID})
}

// Every command against a real service: what it prints and the exit code it ends with,
// for answers and for refusals.
func TestCommandsAgainstTheService(t *testing.T) {
	requestID := fmt.Sprintf("txmctl-%d", time.Now().UnixNano())
	id := createTransfer(t, requestID)
	caller, admin := service.APIKey, service.AdminKey
	tests := []struct {
		name     string
		key      string
		args     []string
		wantCode int
		wantOut  []string // each must appear in stdout (stderr for a refusal)
	}{
		{"tx wait", caller, []string{"tx", "wait", id}, exitOK, []string{"CONFIRMED", id}},
		{"tx get, a table with the cost", caller, []string{"tx", "get", id}, exitOK, []string{"tx hash:", "gas used 21000", "fee "}},
		{"tx get, JSON", caller, []string{"--json", "tx", "get", id}, exitOK, []string{`"txId"`, `"state": "CONFIRMED"`}},
		{"tx by-request", caller, []string{"tx", "by-request", "--signer", servicetest.DevSigner, "--request-id", requestID}, exitOK, []string{id}},
		{"tx wait by request", caller, []string{"tx", "wait", "--signer", servicetest.DevSigner, "--request-id", requestID}, exitOK, []string{"CONFIRMED"}},
		{"tx get, unknown", caller, []string{"tx", "get", "00000000-0000-7000-8000-000000000000"}, exitNotFound, []string{"NOT_FOUND: transaction not found"}},
		{"tx by-request, not an address", caller, []string{"tx", "by-request", "--signer", "nope", "--request-id", "x"}, exitRefused, nil},
		{"tx get, no credential", "", []string{"tx", "get", id}, exitNotAllowed, nil},
		{"tx get, no id", caller, []string{"tx", "get"}, exitUsage, nil},
		{"feed tail", caller, []string{"feed", "tail", "--from-start", "--count", "1"}, exitOK, []string{"CONFIRMED", "FEE (WEI)"}},
		{"feed tail, JSON", caller, []string{"--json", "feed", "tail", "--from-start", "--count", "1"}, exitOK, []string{`"cursor"`}},
		{"signers", admin, []string{"signers"}, exitOK, []string{servicetest.DevSigner}},
		{"signers, JSON", admin, []string{"--json", "signers"}, exitOK, []string{servicetest.DevSigner}},
		{"signers, not an admin", caller, []string{"signers"}, exitNotAllowed, nil},
		{"signers status", admin, []string{"signers", "status", servicetest.DevSigner}, exitOK, []string{servicetest.DevSigner}},
		{"signers roster", admin, []string{"signers", "roster"}, exitOK, nil},
		{"signers roster, JSON", admin, []string{"--json", "signers", "roster"}, exitOK, nil},
		{"nodes", admin, []string{"nodes"}, exitOK, nil},
		{"nodes, JSON", admin, []string{"--json", "nodes"}, exitOK, []string{`"nodeId"`, `"alive": true`}},
		{"quarantine list", admin, []string{"quarantine", "list"}, exitOK, nil},
		{"quarantine list, one signer with nonces", admin, []string{"quarantine", "list", "--signer", servicetest.DevSigner, "--nonces"}, exitOK, nil},
		{"quarantine release, not quarantined", admin, []string{"quarantine", "release", servicetest.DevSigner, "--note", "checked"}, exitNotFound, []string{"signer " + servicetest.DevSigner + " is not quarantined"}},
		{"stuck list", admin, []string{"stuck", "list", "--limit", "5"}, exitOK, nil},
		{"stuck list, JSON", admin, []string{"--json", "stuck", "list", "--signer", servicetest.DevSigner}, exitOK, nil},
		{"stuck resolve, not stuck", admin, []string{"stuck", "resolve", id, "--reason", "test", "--action", "NOOP"}, exitNotFound, nil},
		{"stuck resolve, no reason", admin, []string{"stuck", "resolve", id}, exitUsage, nil},
		{"signers retire, no note", admin, []string{"signers", "retire", servicetest.DevSigner}, exitUsage, nil},
		{"signers add, no source", admin, []string{"signers", "add", "0x00000000000000000000000000000000000000aa"}, exitUsage, nil},
		{"signers add, a source this service has not configured", admin, []string{"signers", "add", "0x00000000000000000000000000000000000000aa", "--source", "awsKms", "--key-ref", "alias/none"}, exitRefused, nil},
		{"signers pause, no note", admin, []string{"signers", "pause", servicetest.DevSigner}, exitUsage, nil},
		{"signers pause, not an address", admin, []string{"signers", "pause", "0x12", "--note", "x"}, exitRefused, []string{"INVALID_ARGUMENT"}},
		{"policy get, none", admin, []string{"policy", "get", "credential", "nobody"}, exitNotFound, nil},
		{"policy list", admin, []string{"policy", "list"}, exitOK, []string{"KIND"}},
		{"policy, not an admin", caller, []string{"policy", "list"}, exitNotAllowed, nil},
		{"audit list, bad since", admin, []string{"audit", "list", "--since", "yesterday"}, exitUsage, nil},
		{"an unknown command", caller, []string{"frobnicate"}, exitUsage, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := txmctl(t, tc.key, tc.args...)
			if code != tc.wantCode {
				t.Fatalf("txmctl %s: exit %d, want %d\nstdout: %s\nstderr: %s", strings.Join(tc.args, " "), code, tc.wantCode, stdout, stderr)
			}
			out := stdout
			if tc.wantCode != exitOK {
				out = stderr
			}
			for _, want := range tc.wantOut {
				if !strings.Contains(out, want) {
					t.Errorf("txmctl %s printed\n%s\nwithout %q", strings.Join(tc.args, " "), out, want)
				}
			}
			if tc.wantCode == exitOK && slices.Contains(tc.args, "--json") && !json.Valid([]byte(firstJSON(stdout))) {
				t.Errorf("--json output is not JSON: %s", stdout)
			}
		})
	}
}

// firstJSON is the first JSON document of out (feed tail prints one per line).
func firstJSON(out string) string {
	out = strings.TrimSpace(out)
	if strings.HasPrefix(out, "{") && strings.Contains(out, "\n{") {
		return out[:strings.Index(out, "\n{")]
	}
	return out
}

// Credentials from the environment are used, and never shown: help and usage texts print
// each flag's default, so the environment is read when the command runs, not made the
// default. (No t.Parallel: it sets the process's environment.)
func TestCredentialsFromTheEnvironmentAreNotShown(t *testing.T) {
	t.Setenv("TXMCTL_API_KEY", service.APIKey)
	t.Setenv("TXMCTL_TOKEN", "")
	base := []string{"--addr", service.GRPCAddr, "--ca-file", service.CAFile, "--timeout", "20s"}
	for _, args := range [][]string{{"--help"}, {"tx", "--help"}, {"tx", "get"}, {"tx", "get", "--no-such-flag"}} {
		var stdout, stderr bytes.Buffer
		run(context.Background(), append(base, args...), &stdout, &stderr)
		if out := stdout.String() + stderr.String(); strings.Contains(out, service.APIKey) {
			t.Errorf("txmctl %s shows the API key from the environment:\n%s", strings.Join(args, " "), out)
		}
	}
	id := createTransfer(t, fmt.Sprintf("txmctl-env-%d", time.Now().UnixNano()))
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), append(base, "tx", "get", id), &stdout, &stderr); code != exitOK {
		t.Fatalf("tx get with the key in the environment only: exit %d, %s", code, stderr.String())
	}
}

// An API key is not sent in plaintext to another machine: txmctl refuses the command line
// (exit 2, naming the flags that fix it) before any call; --plaintext, for a mesh that
// encrypts the connection, lets it through to the call.
func TestAnAPIKeyIsNotSentInPlaintextToAnotherMachine(t *testing.T) {
	t.Setenv("TXMCTL_PLAINTEXT", "")
	args := []string{"--addr", "txmanager.invalid:9090", "--api-key", "txm_secret", "--timeout", "20s", "tx", "get", "00000000-0000-7000-8000-000000000000"}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), args, &stdout, &stderr); code != exitUsage || !strings.Contains(stderr.String(), "--plaintext") {
		t.Fatalf("exit %d (%s), want %d naming --plaintext", code, stderr.String(), exitUsage)
	}
	stdout.Reset()
	stderr.Reset()
	if code := run(context.Background(), append([]string{"--plaintext"}, args...), &stdout, &stderr); code != exitUnavailable && code != exitTimedOut {
		t.Fatalf("with --plaintext: exit %d (%s), want %d or %d: the call made, the host not found", code, stderr.String(), exitUnavailable, exitTimedOut)
	}
}

// feed tail tells, when it stops, the cursor to resume from: for a credential limited to
// some signers, a mark past the completions of the others when those came last, so a resume
// does not start from a cursor retention may delete while its own signers are quiet.
// Before, it printed no cursor but the completions'.
func TestFeedTailTellsWhereToResume(t *testing.T) {
	ctx := t.Context()
	own := createTransfer(t, fmt.Sprintf("resume-own-%d", time.Now().UnixNano()))
	client := callerClient(t)
	// The other signer's transfer is sent once the own one is final: its completion follows.
	if _, err := client.Wait(ctx, own); err != nil {
		t.Fatal(err)
	}
	other, err := client.Create(ctx, &v1.CreateTxRequest{Signer: servicetest.BulkSigner, To: servicetest.Recipient, Value: "1", GasLimit: 21000,
		RequestId: fmt.Sprintf("resume-other-%d", time.Now().UnixNano())})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Wait(ctx, other.GetTx().GetTxId()); err != nil {
		t.Fatal(err)
	}
	resumeFrom := func(stderr string) string {
		_, after, ok := strings.Cut(stderr, "resume with --after ")
		if !ok {
			t.Fatalf("no cursor to resume from in %q", stderr)
		}
		return strings.TrimSpace(strings.SplitN(after, "\n", 2)[0])
	}
	// The whole feed with a credential that sees every signer: the other signer's completion
	// is its last.
	code, stdout, stderr := txmctl(t, service.APIKey, "--json", "--timeout", "3s", "feed", "tail", "--from-start")
	if code != exitTimedOut || !strings.Contains(stdout, other.GetTx().GetTxId()) {
		t.Fatalf("feed tail, every signer: exit %d\n%s\n%s", code, stdout, stderr)
	}
	end := resumeFrom(stderr)
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	if !strings.Contains(lines[len(lines)-1], other.GetTx().GetTxId()) || !strings.Contains(lines[len(lines)-1], `"`+end+`"`) {
		t.Fatalf("resume cursor %s, last line %s: want the other signer's completion, last, and its cursor", end, lines[len(lines)-1])
	}
	// The dev signer's credential: its own completion is the last it prints, and the cursor
	// to resume from is past the other's.
	code, stdout, stderr = txmctl(t, service.DevSignerKey, "--json", "--timeout", "3s", "feed", "tail", "--from-start")
	if code != exitTimedOut || strings.Contains(stdout, other.GetTx().GetTxId()) || !strings.Contains(stdout, own) {
		t.Fatalf("feed tail, the dev signer only: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if got := resumeFrom(stderr); got != end {
		t.Fatalf("the dev signer's credential resumes from %s, want %s (past the other signer's completion)", got, end)
	}
}
