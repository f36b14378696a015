// Package servicetest runs a real txmanager-service for the client module's tests and
// examples: the service binary built from this repository, on its embedded simulated chain,
// serving TLS and requiring API keys, with a database of its own that test/cmd/txm-testdb
// creates (TEST_DATABASE_URL, else the server at 127.0.0.1:5432, else a throwaway cluster).
// The client module itself needs no database driver for that. Both programs are direct
// children of the test process; the service binds port 0 and reports its addresses in
// its log.
package servicetest

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DevSigner is the embedded chain's first development account: funded at genesis and one
// of the service's signers in development. Its key is public; it exists only on that chain.
const DevSigner = "0x06497E1D26D6C5A126E29FFbb240F267C4851c42"

// BulkSigner is the embedded chain's second development account, also a signer: tests that
// send thousands of transactions use it, so that DevSigner's are not queued behind them.
const BulkSigner = "0xDD05D52d943f322b62984464a280cd4F645a4eA7"

// Recipient receives the tests' transfers; nobody holds its key.
const Recipient = "0x000000000000000000000000000000000000dEaD"

// EnvServiceBin names a prebuilt txmanager-service binary to use instead of building one.
const EnvServiceBin = "TXMANAGER_BIN"

// EnvSkip turns a machine without PostgreSQL from a failure into a skip (SKIP_DB_TESTS=1),
// as everywhere in the repository.
const EnvSkip = "SKIP_DB_TESTS"

// ErrNoDatabase: no PostgreSQL server could be found or started for the service.
var ErrNoDatabase = errors.New("no PostgreSQL for the service")

// Service is a running txmanager-service and what a client needs to reach it.
type Service struct {
	GRPCAddr, HTTPAddr string
	// CAFile is the PEM of the CA that issued the service's certificate.
	CAFile string
	// APIKey may use every signer; AdminKey may also use the admin API; DevSignerKey may use
	// DevSigner alone (it sees no other signer's completions).
	APIKey, AdminKey, DevSignerKey string
	LogPath                        string

	cmd      *exec.Cmd
	exited   chan struct{}
	database *database
	dir      string
}

// DSN is the connection string of the service's database, for a test that changes rows
// behind the service's back.
func (s *Service) DSN() string { return s.database.dsn }

// built caches the binaries for the test process: building them per test would cost
// seconds each.
var built struct {
	once            sync.Once
	service, testdb string
	err             error
}

func binaries() (service, testdb string, err error) {
	built.once.Do(func() {
		root, err := repoRoot()
		if err != nil {
			built.err = err
			return
		}
		dir, err := os.MkdirTemp("", "txmclient-test-bin-")
		if err != nil {
			built.err = err
			return
		}
		targets := []string{"./test/cmd/txm-testdb"}
		built.service = os.Getenv(EnvServiceBin)
		if built.service == "" {
			targets = append(targets, "./cmd/txmanager-service")
			built.service = filepath.Join(dir, "txmanager-service")
		}
		built.testdb = filepath.Join(dir, "txm-testdb")
		cmd := exec.Command("go", append([]string{"build", "-o", dir + string(filepath.Separator)}, targets...)...)
		cmd.Dir = filepath.Join(root, "txmanager-service")
		if out, err := cmd.CombinedOutput(); err != nil {
			built.err = fmt.Errorf("go build %s: %w\n%s", strings.Join(targets, " "), err, out)
		}
	})
	return built.service, built.testdb, built.err
}

// repoRoot is the monorepo root above the working directory.
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
			return "", errors.New("no txmanager-service/ above the working directory")
		}
		dir = parent
	}
}

// database is a txm-testdb process holding a fresh database.
type database struct {
	dsn   string
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

func newDatabase(bin, hint string) (*database, error) {
	cmd := exec.Command(bin, "-name", hint)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start txm-testdb: %w", err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		_ = stdin.Close()
		waitErr := cmd.Wait()
		var exit *exec.ExitError
		if errors.As(waitErr, &exit) && exit.ExitCode() == 2 {
			return nil, fmt.Errorf("%w: %s", ErrNoDatabase, strings.TrimSpace(stderr.String()))
		}
		return nil, fmt.Errorf("txm-testdb: %w %s", waitErr, stderr.String())
	}
	return &database{dsn: strings.TrimSpace(line), cmd: cmd, stdin: stdin}, nil
}

// drop closes txm-testdb's input, which drops the database, and waits for it.
func (d *database) drop() error {
	_ = d.stdin.Close()
	return d.cmd.Wait()
}

// Database is a fresh database for a test's own use (a caller's database beside the
// service's); Drop removes it.
type Database struct {
	DSN string
	db  *database
}

// NewDatabase creates a database found the same way as the service's.
func NewDatabase(hint string) (*Database, error) {
	_, testdb, err := binaries()
	if err != nil {
		return nil, err
	}
	db, err := newDatabase(testdb, hint)
	if err != nil {
		return nil, err
	}
	return &Database{DSN: db.dsn, db: db}, nil
}

// Drop removes the database.
func (d *Database) Drop() error { return d.db.drop() }

// TLSConfig trusts the service's certificate.
func (s *Service) TLSConfig() (*tls.Config, error) {
	pem, err := os.ReadFile(s.CAFile)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s: no certificate", s.CAFile)
	}
	return &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}, nil
}

// Start runs a service on a database of its own; name tells its database and node apart.
func Start(name string) (*Service, error) {
	serviceBin, testdbBin, err := binaries()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "txmclient-test-")
	if err != nil {
		return nil, err
	}
	s := &Service{dir: dir, LogPath: filepath.Join(dir, "txmanager.log"), APIKey: randomKey(), AdminKey: randomKey(), DevSignerKey: randomKey()}
	if s.database, err = newDatabase(testdbBin, name); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if err := s.start(serviceBin, name); err != nil {
		_ = s.Stop()
		return nil, err
	}
	return s, nil
}

// serviceConfig paces the service for tests (200 ms blocks, one confirmation) and makes
// it serve TLS and require API keys, as a production deployment would.
const serviceConfig = `environment: development
node: {id: %q}
server:
  http: {addr: "127.0.0.1:0"}
  grpc: {addr: "127.0.0.1:0"}
  tls: {certFile: %q, keyFile: %q}
database: {dsn: %q, migrateOnStart: true}
chain: {rpcUrl: "", embedded: {blockInterval: 200ms}}
confirmations: {required: 1}
pipeline: {submitInterval: 100ms, finalityInterval: 100ms, receipts: {pollInterval: 100ms}}
auth:
  enabled: true
  apiKeys:
    - {id: client-tests, sha256: %q, signers: ["*"], roles: [approver]}
    - {id: operator, sha256: %q, signers: ["*"], admin: true, roles: [approver]}
    - {id: dev-signer-only, sha256: %q, signers: [%q]}
`

func (s *Service) start(bin, name string) error {
	certFile, keyFile, err := s.issueCertificate()
	if err != nil {
		return err
	}
	confPath := filepath.Join(s.dir, "config.yaml")
	body := fmt.Sprintf(serviceConfig, "client-test-"+name, certFile, keyFile, s.database.dsn, digest(s.APIKey), digest(s.AdminKey), digest(s.DevSignerKey), DevSigner)
	if err := os.WriteFile(confPath, []byte(body), 0o600); err != nil {
		return err
	}
	logFile, err := os.Create(s.LogPath)
	if err != nil {
		return err
	}
	defer func() { _ = logFile.Close() }()
	s.cmd = exec.Command(bin, "-conf", confPath)
	s.cmd.Stdout, s.cmd.Stderr = logFile, logFile
	// The service reads these: the file must be the whole configuration.
	s.cmd.Env = withoutVars(os.Environ(), "DATABASE_URL", "DATABASE_MIGRATION_URL", "CHAIN_RPC_URL", "HTTP_ADDR", "GRPC_ADDR", "NODE_ID", "TXM_ENVIRONMENT")
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start txmanager-service: %w", err)
	}
	s.exited = make(chan struct{})
	go func() {
		_ = s.cmd.Wait()
		close(s.exited)
	}()
	deadline := time.After(2 * time.Minute)
	for {
		if grpcAddr, httpAddr, ok := readServing(s.LogPath); ok {
			s.GRPCAddr, s.HTTPAddr = grpcAddr, httpAddr
			return nil
		}
		select {
		case <-s.exited:
			return fmt.Errorf("txmanager-service exited at start; log:\n%s", tail(s.LogPath))
		case <-deadline:
			return fmt.Errorf("txmanager-service did not report its addresses within 2m; log:\n%s", tail(s.LogPath))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop stops the service (SIGTERM, then SIGKILL after 20 s) and drops its database.
func (s *Service) Stop() error {
	var errs []error
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(20 * time.Second):
			errs = append(errs, errors.New("txmanager-service did not stop within 20s of SIGTERM"))
			_ = s.cmd.Process.Kill()
			<-s.exited
		}
	}
	if s.database != nil {
		if err := s.database.drop(); err != nil {
			errs = append(errs, fmt.Errorf("drop the test database: %w", err))
		}
	}
	_ = os.RemoveAll(s.dir)
	return errors.Join(errs...)
}

// readServing finds the service's {"msg":"serving",...} line.
func readServing(path string) (grpcAddr, httpAddr string, ok bool) {
	f, err := os.Open(path)
	if err != nil {
		return "", "", false
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
			return line.GRPC, line.HTTP, true
		}
	}
	return "", "", false
}

// issueCertificate makes a CA and a certificate for 127.0.0.1 it issued.
func (s *Service) issueCertificate() (certFile, keyFile string, err error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	now := time.Now()
	caTemplate := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "txmclient test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		return "", "", err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return "", "", err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "txmanager-service"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return "", "", err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", err
	}
	s.CAFile, certFile, keyFile = filepath.Join(s.dir, "ca.pem"), filepath.Join(s.dir, "cert.pem"), filepath.Join(s.dir, "key.pem")
	for path, block := range map[string]*pem.Block{
		s.CAFile: {Type: "CERTIFICATE", Bytes: caDER},
		certFile: {Type: "CERTIFICATE", Bytes: leafDER},
		keyFile:  {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			return "", "", err
		}
	}
	return certFile, keyFile, nil
}

func randomKey() string {
	var b [24]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails; it crashes the program instead
	return "txm_" + hex.EncodeToString(b[:])
}

func digest(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
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
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return string(data)
}
