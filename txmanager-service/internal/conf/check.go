package conf

import (
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/bionicotaku/txmanager-service/internal/domain"
)

// Check validates the configuration up front, naming every problem; each message starts
// with the key to change and says what it must be, never what it is: a value written in
// the wrong place may be a key, a passphrase or a password.
func (b *Bootstrap) Check() error {
	var errs []error
	req := func(ok bool, key, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
		}
	}
	positive := func(d Duration, key string) { req(d > 0, key, "must be positive") }
	req(b.Environment == EnvironmentDevelopment || b.Environment == EnvironmentProduction,
		"environment", "must be %q or %q", EnvironmentDevelopment, EnvironmentProduction)
	req(b.Environment == EnvironmentDevelopment || len(b.Signers.RawKeys) == 0,
		"signers.rawKeys", "raw keys are for development only (environment is not %s)", EnvironmentDevelopment)
	req(b.Node.ID != "", "node.id", "must not be empty")
	req(b.Server.HTTP.Addr != "", "server.http.addr", "must not be empty")
	req(b.Server.GRPC.Addr != "", "server.grpc.addr", "must not be empty")
	req(b.Server.MaxBodyBytes > 0, "server.maxBodyBytes", "must be positive")
	req(b.Database.DSN != "" || b.Database.LocalDatabase, "database.dsn", "is empty and database.localDatabase is off: set DATABASE_URL (or database.dsn)")
	req(b.Database.MaxConns > 0, "database.maxConns", "must be positive")
	if _, err := ParseQueryExecMode(b.Database.QueryExecMode); err != nil {
		errs = append(errs, err)
	}
	req(b.Lease.Duration > 0, "lease.duration", "must be positive")
	req(b.Lease.RenewInterval > 0 && b.Lease.RenewInterval.Std() < b.Lease.Duration.Std()/2,
		"lease.renewInterval", "(%s) must be positive and below half of lease.duration (%s)", b.Lease.RenewInterval.Std(), b.Lease.Duration.Std())
	req(b.Lease.ClockSkew >= 0 && b.Lease.ClockSkew.Std() < b.Lease.Duration.Std()-b.Lease.RenewInterval.Std(),
		"lease.clockSkew", "must be non-negative and leave room for renewal (below lease.duration - lease.renewInterval)")
	positive(b.Lease.IdleTimeout, "lease.idleTimeout")
	req(b.Writer.Workers > 0 && b.Writer.Workers <= 4096, "writer.workers", "must be in 1..4096")
	req(b.Writer.BatchSize > 0 && b.Writer.BatchSize <= 10000, "writer.batchSize", "must be in 1..10000")
	req(b.Writer.BatchWait >= 0, "writer.batchWait", "must not be negative")
	req(b.Writer.QueueSize > 0, "writer.queueSize", "must be positive")
	req(b.Nonce.NonceStateTimeout >= 0, "nonce.nonceStateTimeout", "must not be negative")
	req(b.Nonce.HoleGrace >= 0, "nonce.holeGrace", "must not be negative")
	req(b.Nonce.UnknownChainNonces == UnknownChainNoncesQuarantine || b.Nonce.UnknownChainNonces == UnknownChainNoncesAdopt,
		"nonce.unknownChainNonces", "must be %q or %q", UnknownChainNoncesQuarantine, UnknownChainNoncesAdopt)
	req(b.Recovery.Mode == RecoveryAdoptByIntent || b.Recovery.Mode == RecoveryHold, "recovery.mode", "must be %q or %q", RecoveryAdoptByIntent, RecoveryHold)
	positive(b.Recovery.AdoptionWindow, "recovery.adoptionWindow")
	positive(b.Recovery.ReleaseWait, "recovery.releaseWait")
	req(b.Create.GasEstimateMultiplier >= 1 && b.Create.GasEstimateMultiplier <= 10, "create.gasEstimateMultiplier", "must be in 1..10")
	req(b.Create.MaxDataBytes > 0 && int64(b.Create.MaxDataBytes)*2 < b.Server.MaxBodyBytes,
		"create.maxDataBytes", "must be positive and fit (hex-encoded) in server.maxBodyBytes")
	req(b.Create.MaxGasLimit >= 21000, "create.maxGasLimit", "must be at least 21000")
	positive(b.Create.FundsCacheFor, "create.fundsCacheFor")
	positive(b.Create.FundsGaugeInterval, "create.fundsGaugeInterval")
	firstWith := map[uint64]int{}
	for i, entry := range b.Chains {
		key := fmt.Sprintf("chains[%d]", i)
		req(entry.ID > 0, key+".id", "must be set (the chain's id, e.g. 1 for Ethereum mainnet)")
		if first, seen := firstWith[entry.ID]; seen && entry.ID > 0 {
			errs = append(errs, fmt.Errorf("%s.id: is listed twice (as chains[%d].id too)", key, first))
		} else {
			firstWith[entry.ID] = i
		}
		req(entry.BlockTime >= 0, key+".blockTime", "must not be negative")
	}
	for i, view := range b.ChainViews() {
		// Keys as the file names them: chain.* for the one chain, chains[i].* for an entry,
		// and the top-level confirmations and fees unless the entry overrides them.
		chainKey, confirmationsKey, feesKey := "chain", "confirmations", "fees"
		if b.ServesSeveralChains() {
			chainKey = fmt.Sprintf("chains[%d]", i)
			if b.Chains[i].Confirmations != nil {
				confirmationsKey = chainKey + ".confirmations"
			}
			if b.Chains[i].Fees != nil {
				feesKey = chainKey + ".fees"
			}
		}
		for _, u := range view.Chain.Endpoints() {
			req(isJSONRPCURL(u), endpointKey(chainKey, b.chainEntry(i), u), "is not a JSON-RPC URL (http, https, ws or wss, and a host)")
		}
		req(len(view.Chain.Endpoints()) > 0 || view.Chain.Embedded.BlockInterval > 0, chainKey+".embedded.blockInterval",
			"must be positive when no chain endpoint is configured")
		positive(view.Chain.Timeouts.Read, chainKey+".timeouts.read")
		positive(view.Chain.Timeouts.Send, chainKey+".timeouts.send")
		positive(view.Chain.Timeouts.Receipts, chainKey+".timeouts.receipts")
		positive(view.Chain.Health.ProbeInterval, chainKey+".health.probeInterval")
		req(view.Confirmations.Required > 0 || view.Confirmations.UseFinalizedTag, confirmationsKey+".required", "must be positive")
		for _, fee := range []struct{ key, value string }{{".maxFeePerGas", view.Fees.MaxFeePerGas}, {".maxPriorityFeePerGas", view.Fees.MaxPriorityFeePerGas}} {
			n, err := domain.ParseOptionalWei(feesKey+fee.key, fee.value)
			req(err == nil && (n == nil || n.Sign() > 0), feesKey+fee.key, "must be a positive number of wei")
		}
		req(view.Fees.BumpPercent >= 10, feesKey+".bumpPercent", "must be at least 10 (nodes refuse smaller replacements)")
	}
	req(b.Signers.External.URL == "" || b.Signers.External.Timeout > 0, "signers.external.timeout", "must be positive")
	errs = append(errs, b.Signers.kmsProblems(b.Environment)...)
	req(b.Signers.RosterPollInterval > 0 && b.Signers.RosterPollInterval <= b.Lease.Duration,
		"signers.rosterPollInterval", "(%s) must be positive and at most lease.duration (%s): a signer added serves on every node within one lease period",
		b.Signers.RosterPollInterval.Std(), b.Lease.Duration.Std())
	req(b.Pipeline.SignerConcurrency > 0, "pipeline.signerConcurrency", "must be positive")
	req(b.Retention.Horizon >= 0, "retention.horizon", "must not be negative")
	positive(b.Retention.Interval, "retention.interval")
	req(b.Retention.BatchSize > 0 && b.Retention.BatchSize <= 10000, "retention.batchSize", "must be in 1..10000")
	req(b.Retention.MaxBatchesPerPass > 0, "retention.maxBatchesPerPass", "must be positive")
	positive(b.Feed.SequenceInterval, "feed.sequenceInterval")
	positive(b.Feed.PollInterval, "feed.pollInterval")
	req(b.Feed.MaxWait >= 0, "feed.maxWait", "must not be negative")
	req(b.Routing.Mode == RoutingBasic || b.Routing.Mode == RoutingForward, "routing.mode", "must be %q or %q", RoutingBasic, RoutingForward)
	req(b.Routing.MaxHops >= 1 && b.Routing.MaxHops <= 5, "routing.maxHops", "must be in 1..5")
	if !b.Auth.Enabled {
		for _, l := range []struct{ key, addr string }{{"server.http.addr", b.Server.HTTP.Addr}, {"server.grpc.addr", b.Server.GRPC.Addr}} {
			req(isLoopback(l.addr), l.key, "refusing to listen beyond loopback without authentication: enable auth (auth.enabled with API keys or JWT) or listen on loopback (127.0.0.1, [::1] or localhost)")
		}
	} else {
		req(len(b.Auth.APIKeys) > 0 || b.Auth.JWT.HMACSecretFile != "" || b.Auth.JWT.PublicKeyFile != "",
			"auth.enabled", "needs auth.apiKeys or auth.jwt.hmacSecretFile / publicKeyFile")
	}
	positive(b.Routing.HeartbeatInterval, "routing.heartbeatInterval")
	req(b.Routing.NodeTimeout > b.Routing.HeartbeatInterval, "routing.nodeTimeout", "must be above routing.heartbeatInterval")
	req(b.Runtime.GCPercent >= 10 && b.Runtime.GCPercent <= 10000, "runtime.gcPercent", "must be in 10..10000 (Go's default is 100)")
	req(b.Runtime.MemoryLimitMiB >= 0, "runtime.memoryLimitMiB", "must not be negative (0: 90%% of the container's memory limit)")
	req(b.Observability.SampleRatio >= 0 && b.Observability.SampleRatio <= 1, "observability.sampleRatio", "must be in 0..1")
	req(b.Pipeline.SubmitBatch > 0, "pipeline.submitBatch", "must be positive")
	req(b.Pipeline.SignConcurrency > 0, "pipeline.signConcurrency", "must be positive")
	req(b.Pipeline.SigningStall.MaxUnsigned > 0, "pipeline.signingStall.maxUnsigned", "must be positive")
	positive(b.Pipeline.SigningStall.MaxDuration, "pipeline.signingStall.maxDuration")
	positive(b.Pipeline.SubmitInterval, "pipeline.submitInterval")
	positive(b.Pipeline.FinalityInterval, "pipeline.finalityInterval")
	positive(b.Pipeline.AdoptInterval, "pipeline.adoptInterval")
	positive(b.Pipeline.Receipts.PollInterval, "pipeline.receipts.pollInterval")
	positive(b.Resubmit.Interval, "resubmit.interval")
	positive(b.Resubmit.ScanInterval, "resubmit.scanInterval")
	positive(b.Stuck.ScanInterval, "stuck.scanInterval")
	req(b.Pipeline.Receipts.Workers > 0, "pipeline.receipts.workers", "must be positive")
	req(b.Pipeline.Receipts.BatchSize > 0 && b.Pipeline.Receipts.BatchSize <= 1000, "pipeline.receipts.batchSize", "must be in 1..1000")
	req(b.Pipeline.Receipts.BlockScanMinPending >= 0, "pipeline.receipts.blockScanMinPending", "must not be negative")
	positive(b.Stuck.MinAge, "stuck.minAge")
	_, actionErr := domain.ParseResolutionAction(b.Stuck.Action)
	req(actionErr == nil, "stuck.action", "must be noop, cancel, replace or placeholder")
	positive(b.Server.HTTP.ReadHeaderTimeout, "server.http.readHeaderTimeout")
	positive(b.Server.HTTP.IdleTimeout, "server.http.idleTimeout")
	positive(b.Server.ReadinessInterval, "server.readinessInterval")
	if b.Server.RateLimit.Enabled {
		req(b.Server.RateLimit.RequestsPerSecond > 0, "server.rateLimit.requestsPerSecond", "must be positive when the rate limit is enabled")
		req(b.Server.RateLimit.Burst > 0, "server.rateLimit.burst", "must be positive when the rate limit is enabled")
	}
	if b.Server.TLS.Enabled() {
		req(b.Server.TLS.CertFile != "", "server.tls.certFile", "must be set with server.tls.keyFile")
		req(b.Server.TLS.KeyFile != "", "server.tls.keyFile", "must be set with server.tls.certFile")
	}
	if p := b.Routing.PeerTLS; p.Enabled() {
		for _, f := range []struct{ key, value string }{{"caFile", p.CAFile}, {"certFile", p.CertFile}, {"keyFile", p.KeyFile}} {
			req(f.value != "", "routing.peerTLS."+f.key, "must be set: mutual TLS between nodes needs caFile, certFile and keyFile")
		}
		req(b.Server.TLS.Enabled(), "server.tls", "routing.peerTLS needs it: peers reach this node's gRPC server over TLS")
	}
	req(!b.Observability.MetricsAuth || b.Auth.Enabled, "observability.metricsAuth", "needs auth.enabled")
	if b.Environment == EnvironmentProduction {
		errs = append(errs, b.productionProblems()...)
	}
	return errors.Join(errs...)
}

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
