package conf

import (
	"fmt"
	"net"
	"os"
	"strconv"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// Observability configures trace export (metrics are always on /metrics).
type Observability struct {
	// MetricsAuth requires credentials on /metrics: an API key with the metrics (or admin)
	// grant, or a JWT with the admin claim. Off by default, for a scraper inside the cluster.
	MetricsAuth bool `json:"metricsAuth"`
	// OTLPEndpoint (host:port, gRPC) receives traces; empty records only a caller's sampled
	// traces (passed on as sampled), though trace ids always reach the logs and the peers.
	OTLPEndpoint string `json:"otlpEndpoint"`
	// OTLPInsecure sends traces to OTLPEndpoint without TLS (a collector beside the node).
	OTLPInsecure bool `json:"otlpInsecure"`
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
	// Roles are the roles credentials may hold and approval rules may name; a credential or
	// a policy naming another is refused.
	Roles []string `json:"roles"`
}

// APIKey grants a caller presenting a key (header X-API-Key) whose SHA-256 is SHA256.
type APIKey struct {
	// ID names the key in logs, metrics and rate limits (its credential id).
	ID string `json:"id"`
	// SHA256 is the lowercase hex SHA-256 of the key; the key itself is never stored.
	SHA256 string `json:"sha256"`
	// Signers the key may use; "*" grants every managed signer.
	Signers []string `json:"signers"`
	// Admin grants the operators' API (/api/v1/admin/...).
	Admin bool `json:"admin"`
	// Metrics lets the key read /metrics when observability.metricsAuth is on.
	Metrics bool `json:"metrics"`
	// Roles the key holds (auth.roles names them): an approval rule's approvers hold its role.
	Roles []string `json:"roles"`
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
	// RolesClaim names the claim listing the token's roles; roles auth.roles does not name
	// are ignored.
	RolesClaim string `json:"rolesClaim"`
}

// Server is the HTTP and gRPC listeners and what they accept.
type Server struct {
	HTTP         HTTPListener `json:"http"`
	GRPC         Listener     `json:"grpc"`
	MaxBodyBytes int64        `json:"maxBodyBytes"`
	// MaxBatchBodyBytes caps the body of a batch of creates (POST /api/v1/tx:batch), which
	// carries up to 1,000 of them.
	MaxBatchBodyBytes int64     `json:"maxBatchBodyBytes"`
	TLS               TLS       `json:"tls"`
	RateLimit         RateLimit `json:"rateLimit"`
	// ReadinessInterval: /readyz answers from a probe of the database and the chain at
	// most this old, so a flood of probes costs one database ping and one RPC per interval.
	ReadinessInterval Duration `json:"readinessInterval"`
	// MaxStreamsPerCredential caps the gRPC streams (WatchCompletions) one credential holds
	// open on a node at once; each also costs one request of its rate limit when it opens.
	MaxStreamsPerCredential int `json:"maxStreamsPerCredential"`
}

// Listener is one server's address and request timeout.
type Listener struct {
	// Addr is where the server listens (host:port; port 0 picks a free port, printed at start).
	Addr string `json:"addr"`
	// Timeout bounds the handling of one request.
	Timeout Duration `json:"timeout"`
}

// HTTPListener adds the connection limits that keep slow clients from holding sockets.
type HTTPListener struct {
	Listener
	// ReadHeaderTimeout bounds how long a client may take to send its request headers
	// (slow-loris); IdleTimeout how long a keep-alive connection may sit unused.
	ReadHeaderTimeout Duration `json:"readHeaderTimeout"`
	// IdleTimeout: a keep-alive connection unused this long is closed.
	IdleTimeout Duration `json:"idleTimeout"`
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

// Routing is how a node reaches the owner of a signer's lease (docs/design.md#routing).
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
	// NodeTimeout: a peer silent this long is taken for gone.
	NodeTimeout Duration `json:"nodeTimeout"`
}

// Routing modes (docs/design.md#routing).
const (
	RoutingBasic   = "basic"
	RoutingForward = "forward"
)

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

// isLoopback reports whether a listen address binds loopback only.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && LoopbackHost(host)
}

// LoopbackHost reports whether host (no port) names this machine's loopback: localhost or
// a loopback address.
func LoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// check: the listeners, the body limit, the rate limit and TLS.
func (s Server) check(p *problems) {
	p.require(s.HTTP.Addr != "", "server.http.addr", "must not be empty")
	p.require(s.GRPC.Addr != "", "server.grpc.addr", "must not be empty")
	p.require(s.MaxBodyBytes > 0, "server.maxBodyBytes", "must be positive")
	p.require(s.MaxBatchBodyBytes >= s.MaxBodyBytes, "server.maxBatchBodyBytes", "must be at least server.maxBodyBytes")
	p.positive(s.HTTP.ReadHeaderTimeout, "server.http.readHeaderTimeout")
	p.positive(s.HTTP.IdleTimeout, "server.http.idleTimeout")
	p.positive(s.ReadinessInterval, "server.readinessInterval")
	p.require(s.MaxStreamsPerCredential > 0, "server.maxStreamsPerCredential", "must be positive")
	if s.RateLimit.Enabled {
		p.require(s.RateLimit.RequestsPerSecond > 0, "server.rateLimit.requestsPerSecond", "must be positive when the rate limit is enabled")
		p.require(s.RateLimit.Burst > 0, "server.rateLimit.burst", "must be positive when the rate limit is enabled")
	}
	if s.TLS.Enabled() {
		p.require(s.TLS.CertFile != "", "server.tls.certFile", "must be set with server.tls.keyFile")
		p.require(s.TLS.KeyFile != "", "server.tls.keyFile", "must be set with server.tls.certFile")
	}
}

// check: the mode, hops, liveness timing, and mutual TLS between nodes.
func (r Routing) check(p *problems, serverTLS TLS) {
	p.require(r.Mode == RoutingBasic || r.Mode == RoutingForward, "routing.mode", "must be %q or %q", RoutingBasic, RoutingForward)
	p.require(r.MaxHops >= 1 && r.MaxHops <= 5, "routing.maxHops", "must be in 1..5")
	p.positive(r.HeartbeatInterval, "routing.heartbeatInterval")
	p.require(r.NodeTimeout > r.HeartbeatInterval, "routing.nodeTimeout", "must be above routing.heartbeatInterval")
	if r.PeerTLS.Enabled() {
		for _, f := range []struct{ key, value string }{{"caFile", r.PeerTLS.CAFile}, {"certFile", r.PeerTLS.CertFile}, {"keyFile", r.PeerTLS.KeyFile}} {
			p.require(f.value != "", "routing.peerTLS."+f.key, "must be set: mutual TLS between nodes needs caFile, certFile and keyFile")
		}
		p.require(serverTLS.Enabled(), "server.tls", "routing.peerTLS needs it: peers reach this node's gRPC server over TLS")
	}
}

// check: without authentication the service listens on loopback only; with it, some
// credential must be configured.
func (a Auth) check(p *problems, server Server) {
	if !a.Enabled {
		for _, l := range []struct{ key, addr string }{{"server.http.addr", server.HTTP.Addr}, {"server.grpc.addr", server.GRPC.Addr}} {
			p.require(isLoopback(l.addr), l.key, "refusing to listen beyond loopback without authentication: enable auth (auth.enabled with API keys or JWT) or listen on loopback (127.0.0.1, [::1] or localhost)")
		}
		return
	}
	p.require(len(a.APIKeys) > 0 || a.JWT.HMACSecretFile != "" || a.JWT.PublicKeyFile != "",
		"auth.enabled", "needs auth.apiKeys or auth.jwt.hmacSecretFile / publicKeyFile")
	known := map[string]bool{}
	for i, r := range a.Roles {
		p.require(domain.ValidateRoleName("role", r) == nil, fmt.Sprintf("auth.roles[%d]", i), "a role name is 1 to 64 lowercase letters, digits, '-' and '_'")
		known[r] = true
	}
	for i, k := range a.APIKeys {
		for j, r := range k.Roles {
			p.require(known[r], fmt.Sprintf("auth.apiKeys[%d].roles[%d]", i, j), "%q is not one of auth.roles %v", r, a.Roles)
		}
	}
}

// check: the sampling ratio, and metrics credentials only where there are credentials.
func (o Observability) check(p *problems, authEnabled bool) {
	p.require(o.SampleRatio >= 0 && o.SampleRatio <= 1, "observability.sampleRatio", "must be in 0..1")
	p.require(!o.MetricsAuth || authEnabled, "observability.metricsAuth", "needs auth.enabled")
}
