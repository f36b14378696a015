package integration

import (
	"bytes"
	"context"
	"errors"
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
