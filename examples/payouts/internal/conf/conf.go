// Package conf is the payouts service's typed configuration: one YAML file whose
// ${VARIABLE:default} placeholders the environment fills, loaded once in main.
package conf

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/go-kratos/kratos/v2/config"
	"github.com/go-kratos/kratos/v2/config/file"
	"github.com/google/wire"

	"github.com/bionicotaku/lingo-utils/txmanager"
	txmclient "github.com/bionicotaku/txmanager-service/client"
)

// ProviderSet maps the Bootstrap onto the libraries' own configurations.
var ProviderSet = wire.NewSet(TxConfig, ClientConfig)

// Bootstrap is the whole configuration.
type Bootstrap struct {
	Server    Server    `json:"server"`
	Database  Database  `json:"database"`
	TxManager TxManager `json:"txmanager"`
	Payouts   Payouts   `json:"payouts"`
	Relay     Relay     `json:"relay"`
	Consumer  Consumer  `json:"consumer"`
}

// Server is the public HTTP API.
type Server struct {
	HTTP struct {
		// Addr is host:port; port 0 binds what the kernel gives (logged as http_addr).
		Addr    string   `json:"addr"`
		Timeout Duration `json:"timeout"`
	} `json:"http"`
}

// Database is the service's own PostgreSQL.
type Database struct {
	DSN      string `json:"dsn"`
	MaxConns int32  `json:"maxConns"`
	Tx       struct {
		Isolation   string   `json:"isolation"`
		Timeout     Duration `json:"timeout"`
		LockTimeout Duration `json:"lockTimeout"`
	} `json:"tx"`
}

// TxManager is how the service reaches txmanager-service.
type TxManager struct {
	// Endpoints: gRPC host:port, comma-separated (TXMANAGER_ADDR).
	Endpoints   string   `json:"endpoints"`
	APIKey      string   `json:"apiKey"`
	CallTimeout Duration `json:"callTimeout"`
	MaxAttempts int      `json:"maxAttempts"`
	// TLS connects with TLS, trusting the system's CAs, or CAFile's alone when it is set
	// (TXMANAGER_CA_FILE, which implies TLS).
	TLS    bool   `json:"tls"`
	CAFile string `json:"caFile"`
	// PlaintextCredentials sends the API key without TLS to endpoints on other machines:
	// only where a mesh encrypts the connection (the client refuses it otherwise).
	PlaintextCredentials bool `json:"plaintextCredentials"`

	// roots is CAFile's certificates, read when the configuration is loaded.
	roots *x509.CertPool
}

// Payouts is the business configuration.
type Payouts struct {
	// Signer is the address every payout is paid from; txmanager must hold its key.
	Signer string `json:"signer"`
}

// Relay drives the outbox.
type Relay struct {
	// Interval is the pause after a pass that found nothing due.
	Interval Duration `json:"interval"`
	// BatchSize is how many outbox rows one transaction claims and sends.
	BatchSize int `json:"batchSize"`
	// ParallelSends bounds the creates of one batch in flight at once.
	ParallelSends int `json:"parallelSends"`
	// SendTimeout bounds one create, its retries included.
	SendTimeout Duration `json:"sendTimeout"`
	// RetryBackoff is the first delay before a failed send is tried again; it doubles up
	// to MaxBackoff.
	RetryBackoff Duration `json:"retryBackoff"`
	MaxBackoff   Duration `json:"maxBackoff"`
}

// Consumer reads txmanager's completions feed.
type Consumer struct {
	// Name is the consumer's cursor row; two processes with one name take turns.
	Name string   `json:"name"`
	Wait Duration `json:"wait"`
	Page uint32   `json:"page"`
	// RestartBackoff is the pause before reading again after a failure.
	RestartBackoff Duration `json:"restartBackoff"`
}

// Duration reads "1.5s" style strings.
type Duration time.Duration

// Std is the time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// UnmarshalJSON accepts a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string like \"2s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	*d = Duration(v)
	return nil
}

// EnvironmentVariables are the variables the configuration file's placeholders may read;
// nothing else in the environment reaches the configuration.
func EnvironmentVariables() []string {
	return []string{"HTTP_ADDR", "DATABASE_URL", "TXMANAGER_ADDR", "TXMANAGER_API_KEY", "TXMANAGER_CA_FILE", "PAYOUTS_SIGNER"}
}

// Load reads path, fills its placeholders from the environment, and checks the result.
func Load(path string) (*Bootstrap, error) {
	c := config.New(config.WithSource(file.NewSource(path), environmentSource{}))
	defer func() { _ = c.Close() }()
	if err := c.Load(); err != nil {
		return nil, fmt.Errorf("load config %s: %w", path, err)
	}
	var bc Bootstrap
	if err := c.Scan(&bc); err != nil {
		return nil, fmt.Errorf("parse config %s: %w", path, err)
	}
	bc.applyDefaults()
	if err := bc.Check(); err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return &bc, nil
}

func (bc *Bootstrap) applyDefaults() {
	setDefault(&bc.Server.HTTP.Addr, "127.0.0.1:8000")
	setDefault(&bc.Server.HTTP.Timeout, Duration(10*time.Second))
	setDefault(&bc.Database.MaxConns, 16)
	setDefault(&bc.TxManager.CallTimeout, Duration(10*time.Second))
	setDefault(&bc.Relay.Interval, Duration(500*time.Millisecond))
	setDefault(&bc.Relay.BatchSize, 50)
	setDefault(&bc.Relay.ParallelSends, 8)
	setDefault(&bc.Relay.SendTimeout, Duration(15*time.Second))
	setDefault(&bc.Relay.RetryBackoff, Duration(time.Second))
	setDefault(&bc.Relay.MaxBackoff, Duration(time.Minute))
	setDefault(&bc.Consumer.Name, "payouts")
	setDefault(&bc.Consumer.Wait, Duration(20*time.Second))
	setDefault(&bc.Consumer.Page, 100)
	setDefault(&bc.Consumer.RestartBackoff, Duration(time.Second))
}

func setDefault[T comparable](field *T, value T) {
	var zero T
	if *field == zero {
		*field = value
	}
}

var addressPattern = regexp.MustCompile(`^0x[0-9a-fA-F]{40}$`)

// Check refuses a configuration the service cannot run on, before anything starts.
func (bc *Bootstrap) Check() error {
	var errs []error
	if bc.Database.DSN == "" {
		errs = append(errs, errors.New("database.dsn is empty (set DATABASE_URL)"))
	}
	if len(bc.Endpoints()) == 0 {
		errs = append(errs, errors.New("txmanager.endpoints is empty (set TXMANAGER_ADDR)"))
	}
	if !addressPattern.MatchString(bc.Payouts.Signer) {
		errs = append(errs, fmt.Errorf("payouts.signer %q is not a 0x address (set PAYOUTS_SIGNER)", bc.Payouts.Signer))
	}
	if bc.Relay.BatchSize < 1 || bc.Relay.ParallelSends < 1 {
		errs = append(errs, errors.New("relay.batchSize and relay.parallelSends must be positive"))
	}
	if bc.Relay.RetryBackoff > bc.Relay.MaxBackoff {
		errs = append(errs, errors.New("relay.retryBackoff exceeds relay.maxBackoff"))
	}
	// The relay's transaction holds its outbox rows while the sends run.
	if bc.Database.Tx.Timeout > 0 && bc.Relay.SendTimeout >= bc.Database.Tx.Timeout {
		errs = append(errs, errors.New("relay.sendTimeout must be shorter than database.tx.timeout"))
	}
	if _, err := txmanager.ParseIsolation(bc.Database.Tx.Isolation); err != nil {
		errs = append(errs, err)
	}
	if bc.TxManager.CAFile != "" {
		pem, err := os.ReadFile(bc.TxManager.CAFile)
		bc.TxManager.roots = x509.NewCertPool()
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("txmanager.caFile: %w", err))
		case !bc.TxManager.roots.AppendCertsFromPEM(pem):
			errs = append(errs, fmt.Errorf("txmanager.caFile %s: no PEM certificate", bc.TxManager.CAFile))
		}
	}
	return errors.Join(errs...)
}

// Endpoints are the txmanager gRPC addresses.
func (bc *Bootstrap) Endpoints() []string {
	var out []string
	for e := range strings.SplitSeq(bc.TxManager.Endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	return out
}

// TxConfig is the transaction manager's configuration.
func TxConfig(bc *Bootstrap) txmanager.Config {
	return txmanager.Config{
		DefaultIsolation: bc.Database.Tx.Isolation,
		DefaultTimeout:   bc.Database.Tx.Timeout.Std(),
		LockTimeout:      bc.Database.Tx.LockTimeout.Std(),
	}
}

// ClientConfig is the txmanager client's configuration.
func ClientConfig(bc *Bootstrap) txmclient.Config {
	cfg := txmclient.Config{
		Endpoints:   bc.Endpoints(),
		APIKey:      bc.TxManager.APIKey,
		CallTimeout: bc.TxManager.CallTimeout.Std(),
		MaxAttempts: bc.TxManager.MaxAttempts,

		PlaintextCredentials: bc.TxManager.PlaintextCredentials,
	}
	if bc.TxManager.TLS || bc.TxManager.roots != nil {
		cfg.TLS = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: bc.TxManager.roots}
	}
	return cfg
}

// environmentSource offers the listed variables to the placeholders.
type environmentSource struct{}

func (environmentSource) Load() ([]*config.KeyValue, error) {
	var kvs []*config.KeyValue
	for _, name := range EnvironmentVariables() {
		if v, ok := os.LookupEnv(name); ok {
			kvs = append(kvs, &config.KeyValue{Key: name, Value: []byte(v)})
		}
	}
	return kvs, nil
}

func (environmentSource) Watch() (config.Watcher, error) { return noWatch{make(chan struct{})}, nil }

// noWatch never reports a change: the configuration is read once at start.
type noWatch struct{ done chan struct{} }

// Next blocks until Stop; context.Canceled tells Kratos' watch loop to end quietly.
func (w noWatch) Next() ([]*config.KeyValue, error) {
	<-w.done
	return nil, context.Canceled
}

func (w noWatch) Stop() error {
	close(w.done)
	return nil
}
