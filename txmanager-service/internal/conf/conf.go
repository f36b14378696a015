// Package conf is the service's typed configuration: embedded defaults, an optional file,
// environment overrides, and validation.
package conf

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/go-kratos/kratos/v2/config"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

//go:embed defaults.yaml
var defaultsYAML []byte

// Bootstrap is the whole configuration, loaded once in main.
type Bootstrap struct {
	// Environment is "development" (raw keys and the embedded chain's dev keys allowed) or
	// "production".
	Environment string   `json:"environment"`
	Node        Node     `json:"node"`
	Server      Server   `json:"server"`
	Database    Database `json:"database"`
	Lease       Lease    `json:"lease"`
	Writer      Writer   `json:"writer"`
	Nonce       Nonce    `json:"nonce"`
	Create      Create   `json:"create"`
	// Chain is the one chain of a single-chain deployment, and the defaults every entry of
	// Chains starts from.
	Chain Chain `json:"chain"`
	// Chains lists the chains one deployment serves, each with its id; empty means Chain
	// alone. The same key on two chains is two signers with their own leases and nonces.
	Chains        []Chain       `json:"chains"`
	Signers       Signers       `json:"signers"`
	Routing       Routing       `json:"routing"`
	Pipeline      Pipeline      `json:"pipeline"`
	Confirmations Confirmations `json:"confirmations"`
	Resubmit      Resubmit      `json:"resubmit"`
	Stuck         Stuck         `json:"stuck"`
	Fees          Fees          `json:"fees"`
	Auth          Auth          `json:"auth"`
	Observability Observability `json:"observability"`
	Feed          Feed          `json:"feed"`
	Retention     Retention     `json:"retention"`
}

// Retention deletes final transactions (with their attempts and feed rows) older than
// Horizon, BatchSize at a time, every Interval; 0 keeps everything. The horizon is also how
// long a requestId is remembered for replays, and how old a feed cursor may be.
type Retention struct {
	Horizon           Duration `json:"horizon"`
	Interval          Duration `json:"interval"`
	BatchSize         int      `json:"batchSize"`
	MaxBatchesPerPass int      `json:"maxBatchesPerPass"`
}

// Feed paces the completions feed: how often completions get their positions, how long a
// long-poll may wait, and how often a waiting reader looks for positions other nodes gave.
type Feed struct {
	SequenceInterval Duration `json:"sequenceInterval"`
	MaxWait          Duration `json:"maxWait"`
	PollInterval     Duration `json:"pollInterval"`
}

// Observability configures trace export (metrics are always on /metrics).
type Observability struct {
	// MetricsAuth requires credentials on /metrics: an API key with the metrics (or admin)
	// grant, or a JWT with the admin claim. Off by default, for a scraper inside the cluster.
	MetricsAuth bool `json:"metricsAuth"`
	// OTLPEndpoint (host:port, gRPC) receives traces; empty records only a caller's sampled
	// traces (passed on as sampled), though trace ids always reach the logs and the peers.
	OTLPEndpoint string `json:"otlpEndpoint"`
	OTLPInsecure bool   `json:"otlpInsecure"`
	// SampleRatio of new traces exported (0..1) when OTLPEndpoint is set; a sampled parent
	// is always followed.
	SampleRatio float64 `json:"sampleRatio"`
	// Pprof serves Go's runtime profiles on /debug/pprof/ (behind the same credentials as
	// /metrics when metricsAuth is on), to find where a slow node spends its time.
	Pprof bool `json:"pprof"`
}

// Auth configures authentication and per-signer authorisation. With it disabled the
// service only listens on loopback.
type Auth struct {
	Enabled bool     `json:"enabled"`
	APIKeys []APIKey `json:"apiKeys"`
	JWT     JWT      `json:"jwt"`
}

// APIKey grants a caller presenting a key (header X-API-Key) whose SHA-256 is SHA256.
type APIKey struct {
	ID string `json:"id"`
	// SHA256 is the lowercase hex SHA-256 of the key; the key itself is never stored.
	SHA256 string `json:"sha256"`
	// Signers the key may use; "*" grants every managed signer.
	Signers []string `json:"signers"`
	Admin   bool     `json:"admin"`
	// Metrics lets the key read /metrics when observability.metricsAuth is on.
	Metrics bool `json:"metrics"`
}

// JWT accepts bearer tokens signed with an HMAC secret (HS256/384/512) or a public key
// (RS*, ES*, EdDSA), with the signers and admin grant in claims.
type JWT struct {
	Issuer   string `json:"issuer"`
	Audience string `json:"audience"`
	// HMACSecretFile holds the shared secret; PublicKeyFile a PEM public key. One of them.
	HMACSecretFile string `json:"hmacSecretFile"`
	PublicKeyFile  string `json:"publicKeyFile"`
	// SignersClaim names the claim listing granted signers ("*" for all); AdminClaim the
	// boolean claim granting the admin API.
	SignersClaim string `json:"signersClaim"`
	AdminClaim   string `json:"adminClaim"`
}

// Pipeline sizes and paces the loops after allocation.
type Pipeline struct {
	// Enabled false makes a node that allocates nonces but never signs, broadcasts or
	// tracks: only for measuring the allocation path alone (make bench). Never in service.
	Enabled          bool     `json:"enabled"`
	SubmitBatch      int      `json:"submitBatch"`
	SubmitInterval   Duration `json:"submitInterval"`
	Receipts         Receipts `json:"receipts"`
	FinalityInterval Duration `json:"finalityInterval"`
	AdoptInterval    Duration `json:"adoptInterval"`
	// SignerConcurrency bounds how many signers' work (signing, broadcasting, rebroadcasting,
	// stuck handling) runs at once; each signer runs on its own, so one that hangs holds up
	// no other.
	SignerConcurrency int `json:"signerConcurrency"`
}

// Receipts tunes the receipt checker.
type Receipts struct {
	PollInterval Duration `json:"pollInterval"`
	Workers      int      `json:"workers"`
	BatchSize    int      `json:"batchSize"`
	MaxBackoff   Duration `json:"maxBackoff"`
	// BlockScanMinPending: from this many transactions awaiting receipts on, new blocks'
	// receipts are read whole (eth_getBlockReceipts); 0 always looks up by hash.
	BlockScanMinPending int `json:"blockScanMinPending"`
}

// Confirmations sets finality.
type Confirmations struct {
	Required        uint64 `json:"required"`
	UseFinalizedTag bool   `json:"useFinalizedTag"`
}

// Resubmit paces rebroadcasts.
type Resubmit struct {
	Interval     Duration `json:"interval"`
	ScanInterval Duration `json:"scanInterval"`
}

// Stuck sets when the head of line is stuck and what the shipped hook does about it.
type Stuck struct {
	MinAge       Duration `json:"minAge"`
	MinAttempts  int      `json:"minAttempts"`
	Action       string   `json:"action"`
	ScanInterval Duration `json:"scanInterval"`
}

// Fees caps and bumps EIP-1559 fees; caps are wei as decimal strings ("" = no cap).
type Fees struct {
	MaxFeePerGas         string `json:"maxFeePerGas"`
	MaxPriorityFeePerGas string `json:"maxPriorityFeePerGas"`
	BumpPercent          int64  `json:"bumpPercent"`
	BaseFeeMultiplier    int64  `json:"baseFeeMultiplier"`
}

type Node struct {
	ID string `json:"id"`
}

type Server struct {
	HTTP         HTTPListener `json:"http"`
	GRPC         Listener     `json:"grpc"`
	MaxBodyBytes int64        `json:"maxBodyBytes"`
	TLS          TLS          `json:"tls"`
	RateLimit    RateLimit    `json:"rateLimit"`
	// ReadinessInterval: /readyz answers from a probe of the database and the chain at
	// most this old, so a flood of probes costs one database ping and one RPC per interval.
	ReadinessInterval Duration `json:"readinessInterval"`
}

type Listener struct {
	Addr    string   `json:"addr"`
	Timeout Duration `json:"timeout"`
}

// HTTPListener adds the connection limits that keep slow clients from holding sockets.
type HTTPListener struct {
	Listener
	// ReadHeaderTimeout bounds how long a client may take to send its request headers
	// (slow-loris); IdleTimeout how long a keep-alive connection may sit unused.
	ReadHeaderTimeout Duration `json:"readHeaderTimeout"`
	IdleTimeout       Duration `json:"idleTimeout"`
}

// TLS is a PEM certificate chain and its key, served on both HTTP and gRPC; empty serves
// plaintext (loopback development, or TLS ended by a proxy in front).
type TLS struct {
	CertFile string `json:"certFile"`
	KeyFile  string `json:"keyFile"`
}

// Enabled reports whether a certificate is configured.
func (t TLS) Enabled() bool { return t.CertFile != "" || t.KeyFile != "" }

// PeerTLS is mutual TLS between nodes: a forwarding node presents CertFile and trusts only
// owners whose server certificate CAFile issued; a node accepts the forwarding headers
// (hop count) only from peers presenting a client certificate CAFile issued.
type PeerTLS struct {
	CAFile   string `json:"caFile"`
	CertFile string `json:"certFile"`
	KeyFile  string `json:"keyFile"`
}

// Enabled reports whether peer TLS is configured.
func (p PeerTLS) Enabled() bool { return p.CAFile != "" || p.CertFile != "" || p.KeyFile != "" }

// RateLimit is a token bucket per credential (API key id, JWT subject): a caller beyond it
// gets 429 RATE_LIMITED with Retry-After. Requests forwarded by a peer are not counted again.
type RateLimit struct {
	Enabled           bool    `json:"enabled"`
	RequestsPerSecond float64 `json:"requestsPerSecond"`
	Burst             int     `json:"burst"`
}

type Database struct {
	DSN            string `json:"dsn"`
	MigrationDSN   string `json:"migrationDsn"`
	MigrateOnStart bool   `json:"migrateOnStart"`
	LocalDatabase  bool   `json:"localDatabase"`
	MaxConns       int32  `json:"maxConns"`
	MinConns       int32  `json:"minConns"`
	QueryExecMode  string `json:"queryExecMode"`
	Tx             Tx     `json:"tx"`
}

type Tx struct {
	Isolation   string   `json:"isolation"`
	Timeout     Duration `json:"timeout"`
	LockTimeout Duration `json:"lockTimeout"`
	// IdleInTransactionTimeout: the server ends a session silent inside a transaction this
	// long, so a frozen owner cannot hold its lease row locked (and block a takeover).
	IdleInTransactionTimeout Duration `json:"idleInTransactionTimeout"`
}

type Lease struct {
	Duration            Duration `json:"duration"`
	RenewInterval       Duration `json:"renewInterval"`
	ClockSkew           Duration `json:"clockSkew"`
	IdleTimeout         Duration `json:"idleTimeout"`
	NotLeaderRetryAfter Duration `json:"notLeaderRetryAfter"`
}

type Writer struct {
	Workers   int      `json:"workers"`
	BatchSize int      `json:"batchSize"`
	BatchWait Duration `json:"batchWait"`
	QueueSize int      `json:"queueSize"`
}

type Nonce struct {
	ChainQuery        ChainQuery `json:"chainQuery"`
	NonceStateTimeout Duration   `json:"nonceStateTimeout"`
	// FillHoles fills a nonce hole (nonces below a signer's open ones that neither the
	// chain nor the service holds) with placeholder transactions once it has lasted
	// HoleGrace; otherwise everything above it would wait for a person.
	FillHoles bool     `json:"fillHoles"`
	HoleGrace Duration `json:"holeGrace"`
	// UnknownChainNonces is what happens when the chain's nonce of a signer is above
	// everything the database knows: "quarantine" (no allocation until an operator
	// releases it) or "adopt" (allocate above them: a key also used outside the service).
	UnknownChainNonces string `json:"unknownChainNonces"`
	// RecoveryScanBlocks bounds how many recent blocks are read to find the transaction
	// that took a nonce the database has no attempt for.
	RecoveryScanBlocks uint64 `json:"recoveryScanBlocks"`
}

// What happens to a signer whose chain nonce is above what the database knows.
const (
	UnknownChainNoncesQuarantine = "quarantine"
	UnknownChainNoncesAdopt      = "adopt"
)

type ChainQuery struct {
	Enabled bool `json:"enabled"`
}

type Create struct {
	EstimateGas           bool    `json:"estimateGas"`
	GasEstimateMultiplier float64 `json:"gasEstimateMultiplier"`
	MaxDataBytes          int     `json:"maxDataBytes"`
	MaxGasLimit           uint64  `json:"maxGasLimit"`
	// CheckFunds refuses (422 INSUFFICIENT_FUNDS) an intent whose value plus gas limit x
	// max fee exceeds the signer's balance minus what its unfinished transactions may cost.
	CheckFunds bool `json:"checkFunds"`
	// SimulateCalls runs intents with call data and a gas limit through eth_estimateGas
	// capped at that limit, refusing one that cannot run (422 INTENT_REVERTS).
	SimulateCalls bool `json:"simulateCalls"`
	// FundsCacheFor is how long a signer's balance and committed cost are reused between
	// creates; FundsGaugeInterval how often every signer's balance gauges are refreshed.
	FundsCacheFor      Duration `json:"fundsCacheFor"`
	FundsGaugeInterval Duration `json:"fundsGaugeInterval"`
}

type Chain struct {
	// ID is the chain's id: required in chains, optional in the single-chain form. When
	// set, endpoints serving another chain are refused and the embedded chain runs under it.
	ID uint64 `json:"id"`
	// RPCURL is one JSON-RPC endpoint, or several separated by commas (handy in one
	// environment variable); RPCURLs lists more. Together, in order of preference, they are
	// the chain's endpoints; none runs the embedded simulated chain.
	RPCURL  string   `json:"rpcUrl"`
	RPCURLs []string `json:"rpcUrls"`
	// BroadcastToAll sends every signed transaction to every healthy endpoint, not just the
	// preferred one, so a transaction reaches the network even when one node's peering is poor.
	BroadcastToAll bool          `json:"broadcastToAll"`
	Timeouts       ChainTimeouts `json:"timeouts"`
	Health         ChainHealth   `json:"health"`
	Embedded       EmbeddedChain `json:"embedded"`
	// Confirmations and Fees replace the top-level ones for this chain (chains only).
	Confirmations *Confirmations `json:"confirmations,omitempty"`
	Fees          *Fees          `json:"fees,omitempty"`
	// BlockTime is the chain's usual block interval, a hint: receipts are looked for once
	// per block instead of at pipeline.receipts.pollInterval.
	BlockTime Duration `json:"blockTime"`
}

// ChainViews is the configuration each chain runs with: for the single-chain form the
// whole configuration, for chains one copy per entry whose chain is the entry (its unset
// settings taken from chain) with the entry's confirmations, fees and block time applied.
// Everything that is not per chain (database, servers, signers) is shared by the copies.
func (b *Bootstrap) ChainViews() []*Bootstrap {
	if len(b.Chains) == 0 {
		return []*Bootstrap{b.withDefaultConfirmations()}
	}
	views := make([]*Bootstrap, 0, len(b.Chains))
	for _, entry := range b.Chains {
		view := *b
		view.Chain = entry.withDefaults(b.Chain)
		if entry.Confirmations != nil {
			view.Confirmations = *entry.Confirmations
		} else {
			view.Confirmations = view.withDefaultConfirmations().Confirmations
		}
		if entry.Fees != nil {
			view.Fees = *entry.Fees
		}
		if entry.BlockTime > 0 {
			view.Pipeline.Receipts.PollInterval = entry.BlockTime
		}
		views = append(views, &view)
	}
	return views
}

// The confirmations a chain requires when confirmations.required is 0 (unset): a real
// chain can reorganise, the embedded simulated chain never does.
const (
	DefaultConfirmations       = 20
	EmbeddedChainConfirmations = 2
)

// withDefaultConfirmations is b with an unset confirmations.required filled in for its
// chain (b itself when it is set, or when finality follows the finalized tag).
func (b *Bootstrap) withDefaultConfirmations() *Bootstrap {
	if b.Confirmations.Required != 0 || b.Confirmations.UseFinalizedTag {
		return b
	}
	view := *b
	view.Confirmations.Required = DefaultConfirmations
	if len(b.Chain.Endpoints()) == 0 {
		view.Confirmations.Required = EmbeddedChainConfirmations
	}
	return &view
}

// ServesSeveralChains reports whether chains names the chains: then every create names
// its chain (when there is more than one) and a chain new to the database is recorded.
func (b *Bootstrap) ServesSeveralChains() bool { return len(b.Chains) > 0 }

// withDefaults fills the entry's unset connection settings from defaults.
func (c Chain) withDefaults(defaults Chain) Chain {
	orDefault(&c.Timeouts.Read, defaults.Timeouts.Read)
	orDefault(&c.Timeouts.Send, defaults.Timeouts.Send)
	orDefault(&c.Timeouts.Receipts, defaults.Timeouts.Receipts)
	orDefault(&c.Health.ProbeInterval, defaults.Health.ProbeInterval)
	orDefault(&c.Health.MaxLagBlocks, defaults.Health.MaxLagBlocks)
	orDefault(&c.Embedded.BlockInterval, defaults.Embedded.BlockInterval)
	orDefault(&c.Embedded.DevAccounts, defaults.Embedded.DevAccounts)
	return c
}

// orDefault sets an unset (zero) setting to its default.
func orDefault[T comparable](setting *T, def T) {
	var unset T
	if *setting == unset {
		*setting = def
	}
}

// ChainTimeouts bound every call to an endpoint: a node that accepts a connection and never
// answers costs one timeout, then the call fails over or fails.
type ChainTimeouts struct {
	Read     Duration `json:"read"`
	Send     Duration `json:"send"`
	Receipts Duration `json:"receipts"`
}

// ChainHealth is how endpoints are watched: each is probed every ProbeInterval; one that
// fails is skipped until it answers again, and one whose head trails the best endpoint by
// more than MaxLagBlocks serves only when nothing better does.
type ChainHealth struct {
	ProbeInterval Duration `json:"probeInterval"`
	MaxLagBlocks  uint64   `json:"maxLagBlocks"`
}

// Endpoints are the configured JSON-RPC URLs in order of preference, without duplicates.
func (c Chain) Endpoints() []string {
	var urls []string
	for _, u := range append(strings.Split(c.RPCURL, ","), c.RPCURLs...) {
		if u = strings.TrimSpace(u); u != "" && !slices.Contains(urls, u) {
			urls = append(urls, u)
		}
	}
	return urls
}

type EmbeddedChain struct {
	BlockInterval Duration `json:"blockInterval"`
	DevAccounts   int      `json:"devAccounts"`
	HTTPAddr      string   `json:"httpAddr"`
}

// Signers configures the key sources. Every address any source holds is a managed signer.
type Signers struct {
	// RawKeys are hex private keys, accepted only when environment is "development".
	RawKeys  []string       `json:"rawKeys"`
	Keystore KeystoreSource `json:"keystore"`
	External ExternalSource `json:"external"`
}

// KeystoreSource is a go-ethereum keystore directory.
type KeystoreSource struct {
	Dir string `json:"dir"`
	// Addresses to unlock; empty means every account in Dir.
	Addresses []string `json:"addresses"`
	// The passphrase comes from a file (first line) or an environment variable, never from
	// the configuration itself.
	PassphraseFile string `json:"passphraseFile"`
	PassphraseEnv  string `json:"passphraseEnv"`
}

// ExternalSource is a clef-compatible signer reached over JSON-RPC (account_signTransaction).
type ExternalSource struct {
	URL       string   `json:"url"`
	Addresses []string `json:"addresses"`
	// Timeout bounds one signing request; a signer that hangs fails that signer's pass
	// instead of holding it.
	Timeout Duration `json:"timeout"`
}

// Environments.
const (
	EnvironmentDevelopment = "development"
	EnvironmentProduction  = "production"
)

type Routing struct {
	Mode string `json:"mode"`
	// AdvertiseGRPCAddr is where peers reach this node's gRPC server; empty means
	// server.grpc.addr (fine on one host; set it behind NAT or in containers).
	AdvertiseGRPCAddr string `json:"advertiseGrpcAddr"`
	// PeerTLS secures forwarding between nodes (required in production forward mode).
	PeerTLS PeerTLS `json:"peerTLS"`
	// MaxHops bounds how many times one create may be forwarded.
	MaxHops int `json:"maxHops"`
	// HeartbeatInterval and NodeTimeout judge which peers are alive.
	HeartbeatInterval Duration `json:"heartbeatInterval"`
	NodeTimeout       Duration `json:"nodeTimeout"`
}

// Routing modes (SPEC 4.4).
const (
	RoutingBasic   = "basic"
	RoutingForward = "forward"
)

// Load reads the embedded defaults, then path (if not empty), then the environment.
func Load(path string) (*Bootstrap, error) {
	sources := []config.Source{embeddedSource{key: "defaults.yaml", body: defaultsYAML}}
	if path != "" {
		// Read once, not through Kratos' file source: configuration is loaded at start-up
		// only, and the file source would start a filesystem watcher for nothing.
		body, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("config file: %w", err)
		}
		sources = append(sources, embeddedSource{key: filepath.Base(path), body: body})
	}
	sources = append(sources, environmentSource{})
	c := config.New(config.WithSource(sources...))
	defer func() { _ = c.Close() }() // only stops the sources' no-op watchers
	if err := c.Load(); err != nil {
		return nil, fmt.Errorf("load config: %w", err)
	}
	var bc Bootstrap
	if err := c.Scan(&bc); err != nil {
		return nil, fmt.Errorf("parse config: %w", err)
	}
	if bc.Node.ID == "" {
		bc.Node.ID = defaultNodeID(bc.Server.GRPC.Addr)
	}
	if err := bc.Check(); err != nil {
		return nil, err
	}
	return &bc, nil
}

// UseBoundPorts records the ports the HTTP and gRPC servers were bound to. They differ
// from the configured ones when a port is 0 (the kernel picks a free one); the node
// registers and prints where it really listens, and a node id that was derived from the
// gRPC address follows it.
func (b *Bootstrap) UseBoundPorts(httpPort, grpcPort int) error {
	derivedID := b.Node.ID == defaultNodeID(b.Server.GRPC.Addr)
	for _, l := range []struct {
		listener *Listener
		port     int
	}{{&b.Server.HTTP.Listener, httpPort}, {&b.Server.GRPC, grpcPort}} {
		host, _, err := net.SplitHostPort(l.listener.Addr)
		if err != nil {
			return fmt.Errorf("server address %q: %w", l.listener.Addr, err)
		}
		l.listener.Addr = net.JoinHostPort(host, strconv.Itoa(l.port))
	}
	if derivedID {
		b.Node.ID = defaultNodeID(b.Server.GRPC.Addr)
	}
	return nil
}

// AdvertisedGRPCAddr is where peers reach this node's gRPC server: routing.advertiseGrpcAddr,
// or the gRPC listen address when that is empty.
func (b *Bootstrap) AdvertisedGRPCAddr() string {
	if b.Routing.AdvertiseGRPCAddr != "" {
		return b.Routing.AdvertiseGRPCAddr
	}
	return b.Server.GRPC.Addr
}

func defaultNodeID(grpcAddr string) string {
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	_, port, err := net.SplitHostPort(grpcAddr)
	if err != nil {
		port = grpcAddr
	}
	return host + ":" + port
}

// Check validates the configuration up front, naming every problem.
func (b *Bootstrap) Check() error {
	var errs []error
	req := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	req(b.Environment == EnvironmentDevelopment || b.Environment == EnvironmentProduction,
		"environment must be %q or %q", EnvironmentDevelopment, EnvironmentProduction)
	req(b.Environment == EnvironmentDevelopment || len(b.Signers.RawKeys) == 0,
		"signers.rawKeys are for development only (environment is %q)", b.Environment)
	req(b.Node.ID != "", "node.id must not be empty")
	req(b.Server.HTTP.Addr != "", "server.http.addr must not be empty")
	req(b.Server.GRPC.Addr != "", "server.grpc.addr must not be empty")
	req(b.Server.MaxBodyBytes > 0, "server.maxBodyBytes must be positive")
	req(b.Database.DSN != "" || b.Database.LocalDatabase, "database.dsn is empty and database.localDatabase is off")
	req(b.Database.MaxConns > 0, "database.maxConns must be positive")
	_, modeErr := ParseQueryExecMode(b.Database.QueryExecMode)
	req(modeErr == nil, "database.queryExecMode: %v", modeErr)
	req(b.Lease.Duration > 0, "lease.duration must be positive")
	req(b.Lease.RenewInterval > 0 && b.Lease.RenewInterval.Std() < b.Lease.Duration.Std()/2,
		"lease.renewInterval (%s) must be positive and below half of lease.duration (%s)", b.Lease.RenewInterval.Std(), b.Lease.Duration.Std())
	req(b.Lease.ClockSkew >= 0 && b.Lease.ClockSkew.Std() < b.Lease.Duration.Std()-b.Lease.RenewInterval.Std(),
		"lease.clockSkew must be non-negative and leave room for renewal")
	req(b.Lease.IdleTimeout > 0, "lease.idleTimeout must be positive")
	req(b.Writer.Workers > 0 && b.Writer.Workers <= 4096, "writer.workers must be in 1..4096")
	req(b.Writer.BatchSize > 0 && b.Writer.BatchSize <= 10000, "writer.batchSize must be in 1..10000")
	req(b.Writer.BatchWait >= 0, "writer.batchWait must not be negative")
	req(b.Writer.QueueSize > 0, "writer.queueSize must be positive")
	req(b.Nonce.NonceStateTimeout >= 0, "nonce.nonceStateTimeout must not be negative")
	req(b.Nonce.HoleGrace >= 0, "nonce.holeGrace must not be negative")
	req(b.Nonce.UnknownChainNonces == UnknownChainNoncesQuarantine || b.Nonce.UnknownChainNonces == UnknownChainNoncesAdopt,
		"nonce.unknownChainNonces must be %q or %q", UnknownChainNoncesQuarantine, UnknownChainNoncesAdopt)
	req(b.Create.GasEstimateMultiplier >= 1 && b.Create.GasEstimateMultiplier <= 10, "create.gasEstimateMultiplier must be in 1..10")
	req(b.Create.MaxDataBytes > 0 && int64(b.Create.MaxDataBytes)*2 < b.Server.MaxBodyBytes,
		"create.maxDataBytes must be positive and fit (hex-encoded) in server.maxBodyBytes")
	req(b.Create.MaxGasLimit >= 21000, "create.maxGasLimit must be at least 21000")
	req(b.Create.FundsCacheFor > 0 && b.Create.FundsGaugeInterval > 0, "create.fundsCacheFor and create.fundsGaugeInterval must be positive")
	seen := map[uint64]bool{}
	for i, entry := range b.Chains {
		req(entry.ID > 0, "chains[%d].id must be set (the chain's id, e.g. 1 for Ethereum mainnet)", i)
		req(!seen[entry.ID], "chains[%d].id %d is listed twice", i, entry.ID)
		req(entry.BlockTime >= 0, "chains[%d].blockTime must not be negative", i)
		seen[entry.ID] = true
	}
	for _, view := range b.ChainViews() {
		name := "chain"
		if b.ServesSeveralChains() {
			name = fmt.Sprintf("chains (id %d)", view.Chain.ID)
		}
		req(len(view.Chain.Endpoints()) > 0 || view.Chain.Embedded.BlockInterval > 0, "%s: embedded.blockInterval must be positive when no chain endpoint is configured", name)
		req(view.Chain.Timeouts.Read > 0 && view.Chain.Timeouts.Send > 0 && view.Chain.Timeouts.Receipts > 0, "%s: timeouts.read, send and receipts must be positive", name)
		req(view.Chain.Health.ProbeInterval > 0, "%s: health.probeInterval must be positive", name)
		req(view.Confirmations.Required > 0 || view.Confirmations.UseFinalizedTag, "%s: confirmations.required must be positive", name)
		for key, v := range map[string]string{"fees.maxFeePerGas": view.Fees.MaxFeePerGas, "fees.maxPriorityFeePerGas": view.Fees.MaxPriorityFeePerGas} {
			n, err := domain.ParseOptionalWei(key, v)
			req(err == nil && (n == nil || n.Sign() > 0), "%s: %s must be a positive number of wei", name, key)
		}
		req(view.Fees.BumpPercent >= 10, "%s: fees.bumpPercent must be at least 10 (nodes refuse smaller replacements)", name)
	}
	req(b.Signers.External.URL == "" || b.Signers.External.Timeout > 0, "signers.external.timeout must be positive")
	req(b.Pipeline.SignerConcurrency > 0, "pipeline.signerConcurrency must be positive")
	req(b.Retention.Horizon >= 0 && b.Retention.Interval > 0 && b.Retention.BatchSize > 0 && b.Retention.BatchSize <= 10000 && b.Retention.MaxBatchesPerPass > 0,
		"retention: horizon must not be negative, interval positive, batchSize in 1..10000, maxBatchesPerPass positive")
	req(b.Feed.SequenceInterval > 0 && b.Feed.PollInterval > 0 && b.Feed.MaxWait >= 0, "feed.sequenceInterval and feed.pollInterval must be positive, feed.maxWait not negative")
	req(b.Routing.Mode == RoutingBasic || b.Routing.Mode == RoutingForward, "routing.mode must be %q or %q", RoutingBasic, RoutingForward)
	req(b.Routing.MaxHops >= 1 && b.Routing.MaxHops <= 5, "routing.maxHops must be in 1..5")
	if !b.Auth.Enabled {
		for _, addr := range []string{b.Server.HTTP.Addr, b.Server.GRPC.Addr} {
			req(isLoopback(addr), "refusing to listen on %q without authentication: enable auth (API keys or JWT) or listen on loopback", addr)
		}
	} else {
		req(len(b.Auth.APIKeys) > 0 || b.Auth.JWT.HMACSecretFile != "" || b.Auth.JWT.PublicKeyFile != "",
			"auth.enabled needs auth.apiKeys or auth.jwt.hmacSecretFile / publicKeyFile")
	}
	req(b.Routing.HeartbeatInterval > 0 && b.Routing.NodeTimeout > b.Routing.HeartbeatInterval,
		"routing.heartbeatInterval must be positive and below routing.nodeTimeout")
	req(b.Observability.SampleRatio >= 0 && b.Observability.SampleRatio <= 1, "observability.sampleRatio must be in 0..1")
	req(b.Pipeline.SubmitBatch > 0, "pipeline.submitBatch must be positive")
	for name, d := range map[string]Duration{
		"pipeline.submitInterval": b.Pipeline.SubmitInterval, "pipeline.finalityInterval": b.Pipeline.FinalityInterval,
		"pipeline.adoptInterval": b.Pipeline.AdoptInterval, "pipeline.receipts.pollInterval": b.Pipeline.Receipts.PollInterval,
		"resubmit.interval": b.Resubmit.Interval, "resubmit.scanInterval": b.Resubmit.ScanInterval, "stuck.scanInterval": b.Stuck.ScanInterval,
	} {
		req(d > 0, "%s must be positive", name)
	}
	req(b.Pipeline.Receipts.Workers > 0 && b.Pipeline.Receipts.BatchSize > 0 && b.Pipeline.Receipts.BatchSize <= 1000,
		"pipeline.receipts.workers must be positive and batchSize in 1..1000")
	req(b.Pipeline.Receipts.BlockScanMinPending >= 0, "pipeline.receipts.blockScanMinPending must not be negative")
	req(b.Stuck.MinAge > 0, "stuck.minAge must be positive")
	if _, err := domain.ParseResolutionAction(b.Stuck.Action); err != nil {
		errs = append(errs, fmt.Errorf("stuck.action must be noop, cancel, replace or placeholder"))
	}
	req(b.Server.HTTP.ReadHeaderTimeout > 0 && b.Server.HTTP.IdleTimeout > 0, "server.http.readHeaderTimeout and idleTimeout must be positive")
	req(b.Server.ReadinessInterval > 0, "server.readinessInterval must be positive")
	req(!b.Server.RateLimit.Enabled || (b.Server.RateLimit.RequestsPerSecond > 0 && b.Server.RateLimit.Burst > 0),
		"server.rateLimit: requestsPerSecond and burst must be positive when enabled")
	req(!b.Server.TLS.Enabled() || (b.Server.TLS.CertFile != "" && b.Server.TLS.KeyFile != ""), "server.tls: set both certFile and keyFile")
	if p := b.Routing.PeerTLS; p.Enabled() {
		req(p.CAFile != "" && p.CertFile != "" && p.KeyFile != "", "routing.peerTLS: set caFile, certFile and keyFile (mutual TLS between nodes)")
		req(b.Server.TLS.Enabled(), "routing.peerTLS needs server.tls: peers reach this node's gRPC server over TLS")
	}
	req(!b.Observability.MetricsAuth || b.Auth.Enabled, "observability.metricsAuth needs auth.enabled")
	if b.Environment == EnvironmentProduction {
		errs = append(errs, b.productionProblems()...)
	}
	return errors.Join(errs...)
}

// productionProblems refuses the development conveniences a production instance must not
// run with; each message names the key and what to set instead.
func (b *Bootstrap) productionProblems() []error {
	var errs []error
	for _, view := range b.ChainViews() {
		if len(view.Chain.Endpoints()) > 0 {
			continue
		}
		if b.ServesSeveralChains() {
			errs = append(errs, fmt.Errorf("chains: chain %d has no rpcUrl: in production every chain needs its JSON-RPC node(s); the embedded simulated chain is for development only", view.Chain.ID))
		} else {
			errs = append(errs, fmt.Errorf("chain.rpcUrl is empty: in production set CHAIN_RPC_URL (or chain.rpcUrl / chain.rpcUrls) to your JSON-RPC node(s); the embedded simulated chain is for development only"))
		}
	}
	if b.Database.LocalDatabase {
		errs = append(errs, fmt.Errorf("database.localDatabase is true: in production set database.localDatabase: false and DATABASE_URL (or database.dsn) to your PostgreSQL"))
	}
	if b.Routing.Mode == RoutingForward {
		if addr := b.AdvertisedGRPCAddr(); !reachableByPeers(addr) {
			errs = append(errs, fmt.Errorf("routing.advertiseGrpcAddr: peers would forward to %q, which names no host they can reach: set ADVERTISE_GRPC_ADDR (or routing.advertiseGrpcAddr) to this instance's address, e.g. the pod IP and gRPC port", addr))
		}
		if !b.Routing.PeerTLS.Enabled() {
			errs = append(errs, fmt.Errorf("routing.peerTLS is not set: forward mode sends callers' credentials between nodes; set routing.peerTLS.caFile, certFile and keyFile (and server.tls) for mutual TLS"))
		}
	}
	if jwt := b.Auth.JWT; b.Auth.Enabled && (jwt.HMACSecretFile != "" || jwt.PublicKeyFile != "") && (jwt.Issuer == "" || jwt.Audience == "") {
		errs = append(errs, fmt.Errorf("auth.jwt.issuer and auth.jwt.audience must both be set in production, or tokens your identity provider issued for other services are accepted here"))
	}
	return errs
}

// reachableByPeers: a concrete host, not the wildcard a server binds to (0.0.0.0, ::, "")
// nor loopback, which on another machine is that machine.
func reachableByPeers(addr string) bool {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" || port == "" || port == "0" || host == "localhost" {
		return false
	}
	ip := net.ParseIP(host)
	return ip == nil || !ip.IsUnspecified() && !ip.IsLoopback()
}

// EnvironmentVariables are the variables the defaults refer to as ${NAME}; only these are
// read, so the rest of the environment never enters the configuration (or its logs).
func EnvironmentVariables() []string {
	return []string{
		"TXM_ENVIRONMENT", "NODE_ID", "HTTP_ADDR", "GRPC_ADDR", "DATABASE_URL", "DATABASE_MIGRATION_URL",
		"CHAIN_RPC_URL", "EMBEDDED_CHAIN_HTTP_ADDR", "ROUTING_MODE", "ADVERTISE_GRPC_ADDR", "OTEL_EXPORTER_OTLP_ENDPOINT",
	}
}

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

// embeddedSource feeds a YAML document held in memory (the embedded defaults, the -conf
// file) to Kratos config.
type embeddedSource struct {
	key  string
	body []byte
}

func (s embeddedSource) Load() ([]*config.KeyValue, error) {
	return []*config.KeyValue{{Key: s.key, Value: s.body, Format: "yaml"}}, nil
}

func (embeddedSource) Watch() (config.Watcher, error) { return noWatch{make(chan struct{})}, nil }

type noWatch struct{ stop chan struct{} }

func (w noWatch) Next() ([]*config.KeyValue, error) { <-w.stop; return nil, context.Canceled }
func (w noWatch) Stop() error                       { close(w.stop); return nil }

// isLoopback reports whether a listen address binds loopback only.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
