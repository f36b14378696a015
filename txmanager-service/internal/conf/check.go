package conf

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Check validates the configuration up front, naming every problem; each message starts
// with the key to change and says what it must be, never what it is: a value written in
// the wrong place may be a key, a passphrase or a password. Each section checks itself
// beside its type; what concerns two sections is checked here.
func (b *Bootstrap) Check() error {
	var p problems
	p.require(b.Environment == EnvironmentDevelopment || b.Environment == EnvironmentProduction,
		"environment", "must be %q or %q", EnvironmentDevelopment, EnvironmentProduction)
	p.require(b.Environment == EnvironmentDevelopment || len(b.Signers.RawKeys) == 0,
		"signers.rawKeys", "raw keys are for development only (environment is not %s)", EnvironmentDevelopment)
	p.require(b.Node.ID != "", "node.id", "must not be empty")
	b.Server.check(&p)
	b.Database.check(&p)
	b.Lease.check(&p)
	b.Writer.check(&p)
	b.Nonce.check(&p)
	b.Recovery.check(&p)
	b.Create.check(&p, b.Server.MaxBodyBytes)
	b.checkChains(&p)
	b.Signers.check(&p, b.Environment, b.Lease.Duration)
	b.Pipeline.check(&p)
	b.Retention.check(&p)
	b.Webhooks.check(&p, b.Retention.Horizon)
	b.Console.check(&p)
	b.Feed.check(&p)
	b.Routing.check(&p, b.Server.TLS)
	b.Auth.check(&p, b.Server)
	b.Runtime.check(&p)
	b.Observability.check(&p, b.Auth.Enabled)
	b.Resubmit.check(&p)
	b.Stuck.check(&p)
	if b.Environment == EnvironmentProduction {
		p.add(b.productionProblems()...)
	}
	return errors.Join(p...)
}

// problems collects what is wrong with a configuration, each naming the key to change.
type problems []error

// require records key's problem unless ok.
func (p *problems) require(ok bool, key, format string, args ...any) {
	if !ok {
		*p = append(*p, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}
}

// positive requires a duration above zero.
func (p *problems) positive(d Duration, key string) { p.require(d > 0, key, "must be positive") }

// add records problems found elsewhere.
func (p *problems) add(errs ...error) { *p = append(*p, errs...) }

// chainEntry is the i-th chains entry, or the single chain.
func (b *Bootstrap) chainEntry(i int) Chain {
	if b.ServesSeveralChains() {
		return b.Chains[i]
	}
	return b.Chain
}

// endpointKey names where an endpoint URL was written: rpcUrls[j], or rpcUrl (one URL or
// a comma-separated list, then which of its URLs), so that a message need not quote it.
func endpointKey(chainKey string, entry Chain, url string) string {
	for j, u := range entry.RPCURLs {
		if strings.TrimSpace(u) == url {
			return fmt.Sprintf("%s.rpcUrls[%d]", chainKey, j)
		}
	}
	if list := strings.Split(entry.RPCURL, ","); len(list) > 1 {
		for j, u := range list {
			if strings.TrimSpace(u) == url {
				return fmt.Sprintf("%s.rpcUrl (URL %d of %d)", chainKey, j+1, len(list))
			}
		}
	}
	return chainKey + ".rpcUrl"
}

// isJSONRPCURL: an endpoint the chain adapter can dial.
func isJSONRPCURL(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return false
	}
	switch u.Scheme {
	case "http", "https", "ws", "wss":
		return true
	}
	return false
}

// productionProblems refuses the development conveniences a production instance must not
// run with; each message names the key and what to set instead.
func (b *Bootstrap) productionProblems() []error {
	var errs []error
	for i, view := range b.ChainViews() {
		if len(view.Chain.Endpoints()) > 0 {
			continue
		}
		if b.ServesSeveralChains() {
			errs = append(errs, fmt.Errorf("chains[%d].rpcUrl is empty: in production every chain needs its JSON-RPC node(s); the embedded simulated chain is for development only", i))
		} else {
			errs = append(errs, fmt.Errorf("chain.rpcUrl is empty: in production set CHAIN_RPC_URL (or chain.rpcUrl / chain.rpcUrls) to your JSON-RPC node(s); the embedded simulated chain is for development only"))
		}
	}
	if b.Database.LocalDatabase {
		errs = append(errs, fmt.Errorf("database.localDatabase is true: in production set database.localDatabase: false and DATABASE_URL (or database.dsn) to your PostgreSQL"))
	}
	if b.Routing.Mode == RoutingForward {
		if addr := b.AdvertisedGRPCAddr(); !reachableByPeers(addr) {
			errs = append(errs, fmt.Errorf("routing.advertiseGrpcAddr: peers would forward to an address that names no host they can reach (empty, wildcard, loopback or port 0; unset, it is server.grpc.addr): set ADVERTISE_GRPC_ADDR (or routing.advertiseGrpcAddr) to this instance's address, e.g. the pod IP and gRPC port"))
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
