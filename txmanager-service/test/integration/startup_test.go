package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The binary itself refuses a production start with development defaults before it
// touches anything: it exits non-zero and says which keys to set.
func TestProductionStartWithoutChainExitsWithTheReason(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := buildServiceBinary(t)
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "TXM_ENVIRONMENT=production", "CHAIN_RPC_URL=", "DATABASE_URL=", "HTTP_ADDR=127.0.0.1:0", "GRPC_ADDR=127.0.0.1:0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("production start without a chain: err = %v, want a non-zero exit", err)
	}
	for _, want := range []string{"chain.rpcUrl is empty: in production set CHAIN_RPC_URL", "database.localDatabase is true"} {
		if !strings.Contains(stderr.String(), want) {
			t.Errorf("stderr does not say %q:\n%s", want, stderr.String())
		}
	}
}

// The binary refuses a configuration file with a misspelled key at once, naming the key and
// the one that was meant, instead of starting on the default it would silently keep.
func TestMisspelledKeysStopTheBinary(t *testing.T) {
	bin := buildServiceBinary(t)
	tests := []struct{ yaml, want string }{
		{"lease:\n  durration: 5s\n", "lease.durration: unknown key (did you mean lease.duration?)"},
		{"leese:\n  duration: 5s\n", "leese: unknown key (did you mean lease?)"},
		{"writer:\n  batchSzie: 10\n", "writer.batchSzie: unknown key (did you mean writer.batchSize?)"},
		{"database:\n  max_conns: 5\n", "database.max_conns: unknown key (did you mean database.maxConns?)"},
		{"pipeline:\n  receipts:\n    pollIntervall: 1s\n", "pipeline.receipts.pollIntervall: unknown key (did you mean pipeline.receipts.pollInterval?)"},
		{"chain:\n  rpcURL: http://127.0.0.1:8545\n", "chain.rpcURL: unknown key (did you mean chain.rpcUrl?)"},
		{"confirmation:\n  required: 3\n", "confirmation: unknown key (did you mean confirmations?)"},
		{"server:\n  http:\n    adr: 127.0.0.1:0\n", "server.http.adr: unknown key (did you mean server.http.addr?)"},
		{"routing:\n  maxHop: 2\n", "routing.maxHop: unknown key (did you mean routing.maxHops?)"},
		{"stuck:\n  minAttemps: 3\n", "stuck.minAttemps: unknown key (did you mean stuck.minAttempts?)"},
		{"fees:\n  bumpPrecent: 20\n", "fees.bumpPrecent: unknown key (did you mean fees.bumpPercent?)"},
	}
	dir := t.TempDir()
	for i, tc := range tests {
		file := filepath.Join(dir, fmt.Sprintf("config-%d.yaml", i))
		if err := os.WriteFile(file, []byte(tc.yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, bin, "-conf", file)
		cmd.Env = append(os.Environ(), "HTTP_ADDR=127.0.0.1:0", "GRPC_ADDR=127.0.0.1:0")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		started := time.Now()
		err := cmd.Run()
		took := time.Since(started)
		cancel()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() == 0 {
			t.Errorf("%q: err = %v, want a non-zero exit; stderr:\n%s", tc.yaml, err, stderr.String())
			continue
		}
		if !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("stderr does not say %q:\n%s", tc.want, stderr.String())
		}
		t.Logf("%-58s refused in %s", tc.want, took.Round(time.Millisecond))
	}
}

// buildServiceBinary compiles the service for tests that run it as a process.
func buildServiceBinary(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "txmanager-service")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "github.com/bionicotaku/txmanager-service/cmd/txmanager-service")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}
