// Package testsupport gives the payouts tests a migrated database of their own (through
// the repository's pgtest harness, on a real PostgreSQL) and a real txmanager-service
// process on the embedded simulated chain. Nothing here is mocked: the tests exercise the
// outbox and inbox against the same service and database engine production uses.
package testsupport

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-kratos/kratos/v2/log"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"
	"github.com/bionicotaku/lingo-utils/txmanager"

	"github.com/bionicotaku/txmanager-examples/payouts/internal/repositories"
)

// DevSigner is the embedded chain's first development account (txmanager-service's
// chain.DevKey(0)): funded at genesis and, in the development environment, one of the
// service's signers. Its key is public; it exists only on the simulated chain.
const DevSigner = "0x06497E1D26D6C5A126E29FFbb240F267C4851c42"

// Recipient receives the test payouts; nobody holds its key.
const Recipient = "0x000000000000000000000000000000000000dEaD"

// Database is a freshly migrated database of the payouts schema.
type Database struct {
	Pool *pgxpool.Pool
	Tx   txmanager.Manager
}

// NewDatabase creates a database for t alone, migrated by the service's own migrator, and
// drops it when t ends.
func NewDatabase(t testing.TB) Database {
	t.Helper()
	dsn := pgtest.NewDatabase(t, pgtest.WithSchema("payouts", migrate))
	pool := pgtest.NewPool(t, dsn)
	return Database{Pool: pool, Tx: newManager(t, pool)}
}

func newManager(t testing.TB, pool *pgxpool.Pool) txmanager.Manager {
	t.Helper()
	component, err := txmanager.NewComponent(txmanager.Config{DefaultTimeout: 30 * time.Second}, pool, log.DefaultLogger)
	if err != nil {
		t.Fatalf("txmanager component: %v", err)
	}
	return component.Manager
}

// migrate applies the payouts migrations to the template database.
func migrate(ctx context.Context, dsn string) error {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	component, err := txmanager.NewComponent(txmanager.Config{}, pool, log.DefaultLogger)
	if err != nil {
		return err
	}
	return repositories.NewMigrator(component.Manager, log.DefaultLogger).Migrate(ctx)
}

// TxManager is a running txmanager-service process.
type TxManager struct {
	GRPCAddr string
	HTTPAddr string
	LogPath  string
}

// EnvTxManagerBin names a prebuilt txmanager-service binary to use instead of building one.
const EnvTxManagerBin = "TXMANAGER_BIN"

// built caches the binary for the test process: building it once per test would cost
// seconds each. It is the only package-level state, and tests alone use it.
var built struct {
	once sync.Once
	path string
	err  error
}

// serviceBinary builds cmd/txmanager-service of the monorepo this module sits in.
func serviceBinary(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv(EnvTxManagerBin); bin != "" {
		return bin
	}
	built.once.Do(func() {
		root, err := repoRoot()
		if err != nil {
			built.err = err
			return
		}
		dir, err := os.MkdirTemp("", "payouts-test-txm-")
		if err != nil {
			built.err = err
			return
		}
		built.path = filepath.Join(dir, "txmanager-service")
		cmd := exec.Command("go", "build", "-o", built.path, "./cmd/txmanager-service")
		cmd.Dir = filepath.Join(root, "txmanager-service")
		if out, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build txmanager-service: %w\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatalf("txmanager-service binary (or set %s): %v", EnvTxManagerBin, built.err)
	}
	return built.path
}

// repoRoot is the monorepo root above the working directory: it holds go.work and
// txmanager-service/.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "txmanager-service", "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no txmanager-service/ above the working directory")
		}
		dir = parent
	}
}

// serviceConfig paces the service for tests: 200ms blocks, one confirmation.
const serviceConfig = `environment: development
node: {id: %q}
server:
  http: {addr: "127.0.0.1:0"}
  grpc: {addr: "127.0.0.1:0"}
database: {dsn: %q, migrateOnStart: true}
chain: {rpcUrl: "", embedded: {blockInterval: 200ms}}
confirmations: {required: 1}
pipeline: {submitInterval: 100ms, finalityInterval: 100ms, receipts: {pollInterval: 100ms}}
`

// StartTxManager runs txmanager-service on its embedded chain and a database of its own,
// and stops it when t ends. The process is a direct child waited for here; it binds port 0
// and reports its addresses in its log.
func StartTxManager(t testing.TB) *TxManager {
	t.Helper()
	bin := serviceBinary(t)
	dsn := pgtest.NewDatabase(t)
	dir := t.TempDir()
	confPath := filepath.Join(dir, "config.yaml")
	body := fmt.Sprintf(serviceConfig, "payouts-test-"+filepath.Base(dir), dsn)
	if err := os.WriteFile(confPath, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "txmanager.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = logFile.Close() }()
	cmd := exec.Command(bin, "-conf", confPath)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// The service reads these: the config file must be the whole configuration.
	cmd.Env = withoutVars(os.Environ(), "DATABASE_URL", "DATABASE_MIGRATION_URL", "CHAIN_RPC_URL", "HTTP_ADDR", "GRPC_ADDR", "NODE_ID", "TXM_ENVIRONMENT")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start txmanager-service: %v", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		if tm, ok := readServing(logPath); ok {
			tm.LogPath = logPath
			return tm
		}
		select {
		case <-exited:
			t.Fatalf("txmanager-service exited at start; log:\n%s", tail(logPath))
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("txmanager-service did not report its addresses within 60s; log:\n%s", tail(logPath))
		}
	}
}

// readServing finds the service's {"msg":"serving",...} line.
func readServing(path string) (*TxManager, bool) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false
	}
	defer func() { _ = f.Close() }()
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		var line struct {
			Msg  string `json:"msg"`
			HTTP string `json:"http_addr"`
			GRPC string `json:"grpc_addr"`
		}
		if json.Unmarshal(scanner.Bytes(), &line) == nil && line.Msg == "serving" && line.GRPC != "" {
			return &TxManager{GRPCAddr: line.GRPC, HTTPAddr: line.HTTP}, true
		}
	}
	return nil, false
}

func withoutVars(env []string, names ...string) []string {
	out := env[:0:0]
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		keep := true
		for _, n := range names {
			keep = keep && name != n
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}

func tail(path string) string {
	data, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.Join(lines[max(0, len(lines)-30):], "\n")
}
