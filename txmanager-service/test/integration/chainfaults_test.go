package integration

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common/hexutil"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/go-kratos/kratos/v2/log"

	"github.com/bionicotaku/txmanager-service/internal/app"
	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/test/faultproxy"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// proxiedChain starts a test chain and n fault proxies in front of its JSON-RPC.
func proxiedChain(t *testing.T, n int) (*chain.SimulatedChain, []*faultproxy.Proxy) {
	t.Helper()
	sim := newTestChain(t, 250*time.Millisecond)
	proxies := make([]*faultproxy.Proxy, n)
	for i := range proxies {
		p, err := faultproxy.Start(sim.HTTPEndpoint())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		proxies[i] = p
	}
	return sim, proxies
}

// throughProxies points the service at the proxies (in order of preference) with short
// chain deadlines.
func throughProxies(proxies []*faultproxy.Proxy, deadline time.Duration) func(*conf.Bootstrap) {
	return func(bc *conf.Bootstrap) {
		var urls []string
		for _, p := range proxies {
			urls = append(urls, p.URL())
		}
		bc.Chain.RPCURL, bc.Chain.RPCURLs = "", urls
		d := conf.Duration(deadline)
		bc.Chain.Timeouts = conf.ChainTimeouts{Read: d, Send: d, Receipts: d}
		bc.Chain.Health.ProbeInterval = conf.Duration(200 * time.Millisecond)
	}
}

// A chain endpoint that accepts connections and never answers: each create is answered
// within one deadline (plus a second), those refused are 503 UNAVAILABLE with Retry-After,
// and a refused create consumes no nonce. Once the hang is noticed every create is refused
// at once. With a healthy second endpoint, creates keep succeeding.
func TestHungChainEndpoint(t *testing.T) {
	t.Parallel()
	const deadline = time.Second
	t.Run("the only endpoint hangs", func(t *testing.T) {
		t.Parallel()
		sim, proxies := proxiedChain(t, 1)
		s := startService(t, serviceOptions{chain: sim, signers: 2, fastPipeline: true, chainQuery: true, configure: throughProxies(proxies, deadline)})
		signer, to := devAddress(t, 0), devAddress(t, 5)
		s.createOK(t, map[string]any{"signer": signer, "to": to, "value": "1", "gasLimit": 21000})
		if err := proxies[0].SetMode(faultproxy.Hang); err != nil {
			t.Fatal(err)
		}
		accepted, refused := 0, 0
		for i := range 12 {
			// The second signer has no cached nonce: allocating for it needs the chain.
			payload := map[string]any{"signer": devAddress(t, i%2), "to": to, "value": fmt.Sprint(i + 2), "gasLimit": 21000}
			started := time.Now()
			a := s.create(t, payload)
			took := time.Since(started)
			if took > deadline+time.Second {
				t.Fatalf("create %d answered after %s with the endpoint hung (deadline %s)", i, took, deadline)
			}
			switch {
			case a.status == http.StatusAccepted:
				accepted++
			case a.status == http.StatusServiceUnavailable && a.reason() == "UNAVAILABLE" && a.retryAfter != "":
				refused++
			default:
				t.Fatalf("create %d: %d %s", i, a.status, a.raw)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if refused == 0 {
			t.Fatalf("no create was refused in 1.2s of a hung endpoint (%d accepted)", accepted)
		}
		// Exactly the accepted creates (and the first) hold a nonce.
		if rows := s.count(t, "SELECT count(*) FROM managed_tx"); rows != int64(accepted+1) {
			t.Fatalf("%d transactions stored, want %d (the accepted ones): a refused create consumed a nonce", rows, accepted+1)
		}
		t.Logf("with the only endpoint hung: %d accepted (nonce cached, before the hang was noticed), %d refused", accepted, refused)
	})
	t.Run("a healthy second endpoint", func(t *testing.T) {
		t.Parallel()
		sim, proxies := proxiedChain(t, 2)
		s := startService(t, serviceOptions{chain: sim, signers: 3, fastPipeline: true, chainQuery: true, configure: throughProxies(proxies, deadline)})
		to := devAddress(t, 5)
		if err := proxies[0].SetMode(faultproxy.Hang); err != nil {
			t.Fatal(err)
		}
		var latencies []time.Duration
		var ids []string
		for i := range 60 {
			started := time.Now()
			// No gas limit: estimation needs the chain on every create.
			a := s.create(t, map[string]any{"signer": devAddress(t, i%3), "to": to, "value": fmt.Sprint(i + 1)})
			latencies = append(latencies, time.Since(started))
			if a.status != http.StatusAccepted {
				t.Fatalf("create %d with one healthy endpoint: %d %s", i, a.status, a.raw)
			}
			ids = append(ids, a.tx()["txId"].(string))
		}
		slices.Sort(latencies)
		t.Logf("creates during the hang: p50 %s, p99 %s, max %s", latencies[len(latencies)/2], latencies[len(latencies)*99/100], latencies[len(latencies)-1])
		for _, id := range ids {
			waitFor(t, 60*time.Second, "transaction "+id+" confirmed through the healthy endpoint", func() bool { return s.tx(t, id).state == "CONFIRMED" })
		}
	})
}

// A load-balanced endpoint whose backends stand at different heights (every other request
// sees a head 5 blocks behind) must not look like reorgs: no receipt is reverted and no
// transaction rebroadcast.
func TestLaggingEndpointIsNeitherAReorgNorARebroadcast(t *testing.T) {
	t.Parallel()
	sim, proxies := proxiedChain(t, 1)
	proxies[0].SetLag(5, true)
	if err := proxies[0].SetMode(faultproxy.Lag); err != nil {
		t.Fatal(err)
	}
	s := startService(t, serviceOptions{chain: sim, signers: 2, fastPipeline: true, configure: func(bc *conf.Bootstrap) {
		throughProxies(proxies, 5*time.Second)(bc)
		bc.Resubmit.Interval = conf.Duration(30 * time.Second)
		// Several seconds between a receipt and its finality: many finality passes judge
		// receipts while half of the endpoint's answers are 5 blocks behind.
		bc.Confirmations.Required = 12
	}})
	var ids []string
	for i := range 20 {
		ids = append(ids, s.createOK(t, map[string]any{"signer": devAddress(t, i%2), "to": devAddress(t, 6), "value": fmt.Sprint(i + 1), "gasLimit": 21000}))
		time.Sleep(100 * time.Millisecond)
	}
	for _, id := range ids {
		waitFor(t, 90*time.Second, "transaction "+id+" confirmed", func() bool { return s.tx(t, id).state == "CONFIRMED" })
	}
	metrics := s.metricSums(t)
	if metrics["reorg_total"] != 0 {
		t.Fatalf("reorg_total = %v behind a lagging endpoint, want 0", metrics["reorg_total"])
	}
	if resubmits := s.count(t, "SELECT count(*) FROM managed_tx WHERE submit_attempts > 1"); resubmits != 0 {
		t.Fatalf("%d transactions were broadcast more than once", resubmits)
	}
	if proxies[0].Requests() < 50 {
		t.Fatalf("only %d requests went through the lagging endpoint", proxies[0].Requests())
	}
}

// A database is bound to the chain it first served: starting it against another chain
// (another network, or the embedded chain of an earlier run) fails with both identities.
func TestStartAgainstAnotherChainIsRefused(t *testing.T) {
	t.Parallel()
	build := func(t *testing.T, dsn string, rpcURL string) error {
		bc, err := conf.Load("")
		if err != nil {
			t.Fatal(err)
		}
		bc.Database.DSN, bc.Database.MigrateOnStart = dsn, false
		bc.Server.HTTP.Addr, bc.Server.GRPC.Addr = "127.0.0.1:0", "127.0.0.1:0"
		bc.Chain.RPCURL = rpcURL
		if rpcURL != "" {
			key, err := chain.DevKey(0)
			if err != nil {
				t.Fatal(err)
			}
			bc.Signers.RawKeys = []string{hexutil.Encode(crypto.FromECDSA(key))}
		}
		listeners, err := app.Listen(bc)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = listeners.Close() }()
		_, cleanup, err := app.New(bc, listeners, log.NewStdLogger(io.Discard), services.BuildVersion("test"))
		if err == nil {
			cleanup()
		}
		return err
	}
	t.Run("another network", func(t *testing.T) {
		t.Parallel()
		dsn := testsupport.MigratedDSN(t)
		first, second := newTestChain(t, 0), newTestChain(t, 0)
		if err := build(t, dsn, first.HTTPEndpoint()); err != nil {
			t.Fatalf("first start: %v", err)
		}
		if err := build(t, dsn, first.HTTPEndpoint()); err != nil {
			t.Fatalf("restart on the same chain: %v", err)
		}
		err := build(t, dsn, second.HTTPEndpoint())
		if !errors.Is(err, services.ErrOtherChain) || !strings.Contains(err.Error(), "chain id 1337") {
			t.Fatalf("start against another chain: %v, want ErrOtherChain naming both", err)
		}
	})
	t.Run("the embedded chain of an earlier run", func(t *testing.T) {
		t.Parallel()
		dsn := testsupport.MigratedDSN(t)
		if err := build(t, dsn, ""); err != nil {
			t.Fatalf("first start: %v", err)
		}
		err := build(t, dsn, "")
		if !errors.Is(err, services.ErrOtherChain) || !strings.Contains(err.Error(), "DROP SCHEMA public CASCADE") {
			t.Fatalf("second embedded start on the same database: %v, want a refusal saying how to reset", err)
		}
	})
}

// One signer whose external signer hangs holds up no other signer: the other's
// transactions are signed, sent and confirmed while the first one's signing waits, even
// with a signing deadline longer than the test. The signer is a real clef behind a proxy
// that stops passing requests on.
func TestHungSignerDelaysNoOtherSigner(t *testing.T) {
	t.Parallel()
	sim := newTestChain(t, 250*time.Millisecond)
	remote := startClefSigner(t, sim.DevKeys()[6], false)
	stuck := remote.clefAddr.Hex()
	s := startService(t, serviceOptions{chain: sim, signers: 1, fastPipeline: true, configure: func(bc *conf.Bootstrap) {
		bc.Signers.External = conf.ExternalSource{URL: remote.clefProxy.URL(), Addresses: []string{stuck}, Timeout: conf.Duration(time.Minute)}
	}})
	if err := remote.clefProxy.SetMode(faultproxy.Hang); err != nil {
		t.Fatal(err)
	}
	hung := s.createOK(t, map[string]any{"signer": stuck, "to": devAddress(t, 7), "value": "1", "gasLimit": 21000})
	time.Sleep(500 * time.Millisecond) // the submit pass is now waiting on the hung signer
	var others []string
	for i := range 5 {
		others = append(others, s.createOK(t, map[string]any{"signer": devAddress(t, 0), "to": devAddress(t, 7), "value": fmt.Sprint(i + 2), "gasLimit": 21000}))
	}
	for _, id := range others {
		waitFor(t, 20*time.Second, "the healthy signer's transaction "+id+" confirmed while the other signer hangs", func() bool { return s.tx(t, id).state == "CONFIRMED" })
	}
	if state := s.tx(t, hung).state; state != "ALLOCATED" {
		t.Fatalf("the hung signer's transaction is %s, want ALLOCATED (never signed)", state)
	}
}
