package chain_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/go-kratos/kratos/v2/log"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/test/faultproxy"
)

// faultyEndpoints puts one fault proxy per name in front of sim's JSON-RPC.
func faultyEndpoints(t *testing.T, sim *chain.SimulatedChain, n int) ([]*faultproxy.Proxy, []chain.Endpoint) {
	t.Helper()
	var proxies []*faultproxy.Proxy
	var endpoints []chain.Endpoint
	for i := range n {
		p, err := faultproxy.Start(sim.HTTPEndpoint())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		rpcChain, err := chain.DialRPC(context.Background(), p.URL())
		if err != nil {
			t.Fatal(err)
		}
		proxies = append(proxies, p)
		endpoints = append(endpoints, chain.Endpoint{Name: chain.EndpointName(i, p.URL()), Chain: rpcChain})
	}
	return proxies, endpoints
}

func newMulti(t *testing.T, endpoints []chain.Endpoint, cfg chain.MultiChainConfig) *chain.MultiChain {
	t.Helper()
	m, err := chain.NewMultiChain(endpoints, cfg, log.DefaultLogger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// timeout is long enough that a healthy endpoint answers within it on a loaded machine
// under -race; the hung endpoint's cost is bounded by it either way.
const timeout = time.Second

// A hung endpoint costs the first call one timeout, then is skipped: calls go to the
// healthy one at once. When it answers again, the prober brings it back.
func TestMultiChainFailsOverFromAHungEndpoint(t *testing.T) {
	t.Parallel()
	sim := newSimulated(t, chain.SimulatedConfig{DevAccounts: 1, HTTPAddr: "127.0.0.1:0", BlockInterval: 200 * time.Millisecond})
	proxies, endpoints := faultyEndpoints(t, sim, 2)
	m := newMulti(t, endpoints, chain.MultiChainConfig{ReadTimeout: timeout, SendTimeout: timeout, ReceiptsTimeout: timeout, ProbeInterval: 100 * time.Millisecond, MaxLagBlocks: 3})
	if err := proxies[0].SetMode(faultproxy.Hang); err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	started := time.Now()
	if _, err := m.LatestHeader(ctx); err != nil {
		t.Fatalf("head with one hung endpoint: %v", err)
	}
	if took := time.Since(started); took > timeout+2*time.Second {
		t.Fatalf("first call took %s; at most one timeout (%s) should be lost", took, timeout)
	}
	if m.Health()[0].Reachable {
		t.Fatal("the hung endpoint is still counted reachable")
	}
	before := proxies[0].Requests()
	for range 20 {
		if _, err := m.PendingNonceAt(ctx, sim.DevAddresses()[0]); err != nil {
			t.Fatal(err)
		}
	}
	// Only the prober may still knock on it (once per 100ms at most); calls may not.
	if calls := proxies[0].Requests() - before; calls > 15 {
		t.Fatalf("the hung endpoint got %d requests during 20 calls", calls)
	}
	if err := proxies[0].SetMode(faultproxy.Pass); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "the endpoint to be reachable again", func() bool { return m.Health()[0].Reachable })
}

// With every endpoint hung or refusing, a call fails within one timeout per endpoint with
// ErrNoChainEndpoint, and later calls fail at once until one answers again.
func TestMultiChainFailsFastWhenNoEndpointAnswers(t *testing.T) {
	t.Parallel()
	sim := newSimulated(t, chain.SimulatedConfig{DevAccounts: 1, HTTPAddr: "127.0.0.1:0"})
	proxies, endpoints := faultyEndpoints(t, sim, 2)
	m := newMulti(t, endpoints, chain.MultiChainConfig{ReadTimeout: timeout, SendTimeout: timeout, ReceiptsTimeout: timeout, ProbeInterval: time.Hour})
	if err := proxies[0].SetMode(faultproxy.Hang); err != nil {
		t.Fatal(err)
	}
	if err := proxies[1].SetMode(faultproxy.Refuse); err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	started := time.Now()
	_, err := m.PendingNonceAt(ctx, sim.DevAddresses()[0])
	if !errors.Is(err, services.ErrNoChainEndpoint) {
		t.Fatalf("err = %v, want ErrNoChainEndpoint", err)
	}
	if took := time.Since(started); took > 2*timeout+2*time.Second {
		t.Fatalf("failing took %s", took)
	}
	started = time.Now()
	if _, err := m.PendingNonceAt(ctx, sim.DevAddresses()[0]); !errors.Is(err, services.ErrNoChainEndpoint) {
		t.Fatalf("second call: %v", err)
	}
	if took := time.Since(started); took > 100*time.Millisecond {
		t.Fatalf("the second call waited %s instead of failing at once", took)
	}
}

// An answer to a call sent before another call failed does not bring the endpoint back:
// it was on its way while the endpoint went down. Until the prober finds it answering,
// the chain stays unusable and a create is refused at once rather than taken.
func TestALateAnswerDoesNotBringBackAnEndpointThatFailedSince(t *testing.T) {
	t.Parallel()
	sim := newSimulated(t, chain.SimulatedConfig{DevAccounts: 1, HTTPAddr: "127.0.0.1:0"})
	proxies, endpoints := faultyEndpoints(t, sim, 1)
	m := newMulti(t, endpoints, chain.MultiChainConfig{ReadTimeout: 300 * time.Millisecond, SendTimeout: 30 * time.Second,
		ReceiptsTimeout: timeout, ProbeInterval: 100 * time.Millisecond})
	ctx := testContext(t)
	held, release := proxies[0].HoldAnswers("eth_sendRawTransaction")
	defer release()
	sent := make(chan error, 1)
	go func() {
		// Not a transaction: the node's answer is a refusal of it, an answer all the same.
		_, err := m.SendRawTransactions(ctx, [][]byte{{0x01, 0x02}})
		sent <- err
	}()
	waitUntil(t, 10*time.Second, "the node's answer to be held", func() bool { return held() == 1 })
	if err := proxies[0].SetMode(faultproxy.Hang); err != nil {
		t.Fatal(err)
	}
	if _, err := m.LatestHeader(ctx); !errors.Is(err, services.ErrNoChainEndpoint) {
		t.Fatalf("head while the endpoint hangs: %v, want ErrNoChainEndpoint", err)
	}
	release()
	if err := <-sent; err != nil {
		t.Fatalf("the held broadcast: %v, want the node's answer", err)
	}
	if m.Health()[0].Reachable {
		t.Fatal("the endpoint counts reachable after a late answer, while it hangs")
	}
	if err := m.Usable(); !errors.Is(err, services.ErrNoChainEndpoint) {
		t.Fatalf("Usable after a late answer: %v, want ErrNoChainEndpoint", err)
	}
	if err := proxies[0].SetMode(faultproxy.Pass); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "the prober to bring the endpoint back", func() bool { return m.Usable() == nil })
}

// An answer to a call sent after the one that failed does bring the endpoint back: on a
// loaded machine one slow call times out while later ones are answered, and the chain
// should not be refused until the next probe.
func TestAnAnswerToALaterCallBringsBackAnEndpointAfterATimeout(t *testing.T) {
	t.Parallel()
	sim := newSimulated(t, chain.SimulatedConfig{DevAccounts: 1, HTTPAddr: "127.0.0.1:0"})
	proxies, endpoints := faultyEndpoints(t, sim, 1)
	// No prober: the proxy's requests are the test's own, counted below.
	m := newMulti(t, endpoints, chain.MultiChainConfig{ReadTimeout: 500 * time.Millisecond, SendTimeout: 30 * time.Second,
		ReceiptsTimeout: timeout})
	ctx := testContext(t)
	held, release := proxies[0].HoldAnswers("eth_sendRawTransaction")
	defer release()
	// The slow call: it reaches the node's proxy while it hangs, and times out.
	if err := proxies[0].SetMode(faultproxy.Hang); err != nil {
		t.Fatal(err)
	}
	before := proxies[0].Requests()
	slow := make(chan error, 1)
	go func() {
		_, err := m.PendingNonceAt(ctx, sim.DevAddresses()[0])
		slow <- err
	}()
	waitUntil(t, 10*time.Second, "the slow call to reach the proxy", func() bool { return proxies[0].Requests() > before })
	if err := proxies[0].SetMode(faultproxy.Pass); err != nil {
		t.Fatal(err)
	}
	// A later call, answered by the node while the slow one waits; its answer is read after
	// the slow one has failed.
	later := make(chan error, 1)
	go func() {
		_, err := m.SendRawTransactions(ctx, [][]byte{{0x01, 0x02}})
		later <- err
	}()
	waitUntil(t, 10*time.Second, "the later call's answer to be held", func() bool { return held() == 1 })
	if err := <-slow; !errors.Is(err, services.ErrNoChainEndpoint) {
		t.Fatalf("the slow call: %v, want it timed out", err)
	}
	if m.Health()[0].Reachable {
		t.Fatal("the endpoint still counts reachable after its call timed out")
	}
	release()
	if err := <-later; err != nil {
		t.Fatalf("the later call: %v, want the node's answer", err)
	}
	if err := m.Usable(); err != nil {
		t.Fatalf("Usable after a later call was answered: %v, want the endpoint back", err)
	}
}

// A probe sent before a call was throttled and answered after it does not bring the
// endpoint back before its pause ends: the endpoint asked to be left alone.
func TestALateProbeDoesNotEndAThrottledEndpointsPause(t *testing.T) {
	t.Parallel()
	sim := newSimulated(t, chain.SimulatedConfig{DevAccounts: 1, HTTPAddr: "127.0.0.1:0"})
	proxies, endpoints := faultyEndpoints(t, sim, 1)
	proxies[0].SetRetryAfter(time.Minute)
	m := newMulti(t, endpoints, chain.MultiChainConfig{ReadTimeout: timeout, SendTimeout: timeout, ReceiptsTimeout: timeout, ProbeInterval: 50 * time.Millisecond})
	ctx := testContext(t)
	held, release := proxies[0].HoldAnswers("eth_getHeaderByNumber")
	defer release()
	waitUntil(t, 10*time.Second, "a probe's answer to be held", func() bool { return held() >= 1 })
	if err := proxies[0].SetMode(faultproxy.TooManyRequests); err != nil {
		t.Fatal(err)
	}
	if _, err := m.PendingNonceAt(ctx, sim.DevAddresses()[0]); err == nil {
		t.Fatal("a call answered while the endpoint throttles every request")
	}
	if m.Health()[0].Reachable {
		t.Fatal("the throttled endpoint still counts reachable")
	}
	release()
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if m.Health()[0].Reachable {
			t.Fatal("a probe answered after the throttling brought the endpoint back within its pause")
		}
	}
}

// An answer about the request (a revert) is returned as it is, not retried elsewhere.
func TestMultiChainDoesNotFailOverOnAnAnswer(t *testing.T) {
	t.Parallel()
	sim := newSimulated(t, chain.SimulatedConfig{DevAccounts: 1, HTTPAddr: "127.0.0.1:0"})
	proxies, endpoints := faultyEndpoints(t, sim, 2)
	m := newMulti(t, endpoints, chain.MultiChainConfig{ReadTimeout: timeout, SendTimeout: timeout, ReceiptsTimeout: timeout})
	from := sim.DevAddresses()[0]
	_, err := m.EstimateGas(testContext(t), services.CallRequest{From: from, Data: []byte{0x60, 0x00, 0x60, 0x00, 0xfd}}) // PUSH 0 PUSH 0 REVERT
	if !errors.Is(err, services.ErrExecutionReverted) {
		t.Fatalf("err = %v, want a revert", err)
	}
	if proxies[1].Requests() != 0 {
		t.Fatalf("the second endpoint was asked %d times after the first answered", proxies[1].Requests())
	}
	if !m.Health()[0].Reachable {
		t.Fatal("an endpoint that answered was marked failed")
	}
}

// Endpoints of different chains are refused at start.
func TestMultiChainRefusesEndpointsOfDifferentChains(t *testing.T) {
	t.Parallel()
	a := newSimulated(t, chain.SimulatedConfig{DevAccounts: 1, HTTPAddr: "127.0.0.1:0"})
	b := newSimulated(t, chain.SimulatedConfig{DevAccounts: 1, HTTPAddr: "127.0.0.1:0"})
	_, first := faultyEndpoints(t, a, 1)
	_, second := faultyEndpoints(t, b, 1)
	m := newMulti(t, append(first, second...), chain.MultiChainConfig{ReadTimeout: timeout, SendTimeout: timeout, ReceiptsTimeout: timeout})
	if _, err := m.VerifyIdentity(testContext(t)); err == nil {
		t.Fatal("two endpoints with different genesis blocks were accepted as one chain")
	}
}

// An endpoint that fails and comes back is checked again before it is used: one restarted on
// another chain (another network, a chain reset) is marked and never used, however well it
// served before.
func TestAnEndpointThatComesBackOnAnotherChainIsNotUsed(t *testing.T) {
	t.Parallel()
	a := newSimulated(t, chain.SimulatedConfig{DevAccounts: 1, HTTPAddr: "127.0.0.1:0"})
	b := newSimulated(t, chain.SimulatedConfig{DevAccounts: 1, HTTPAddr: "127.0.0.1:0"})
	proxies, endpoints := faultyEndpoints(t, a, 2)
	m := newMulti(t, endpoints, chain.MultiChainConfig{ReadTimeout: timeout, SendTimeout: timeout, ReceiptsTimeout: timeout, ProbeInterval: 50 * time.Millisecond})
	if _, err := m.VerifyIdentity(testContext(t)); err != nil {
		t.Fatal(err)
	}
	if err := proxies[0].SetMode(faultproxy.Refuse); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "the endpoint to be seen down", func() bool { return !m.Health()[0].Reachable })
	proxies[0].SetUpstream(b.HTTPEndpoint())
	if err := proxies[0].SetMode(faultproxy.Pass); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "the endpoint to be checked again", func() bool { return m.Health()[0].WrongChain })
	if h := m.Health()[0]; h.Reachable {
		t.Fatalf("the endpoint of another chain: %+v, want it not used", h)
	}
}

func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A provider's API key stays out of every error a failed endpoint leaves: what callers get
// (logged, stored on transactions, shown through the API), the endpoint's health, a
// broadcast's failure and the spans sent to a collector. The key is in the endpoint's own
// address, or in the address of the provider behind a gateway, which answers 502 with
// Go's error naming its upstream (before, only the endpoint's own address was hidden).
func TestEndpointKeysStayOutOfErrors(t *testing.T) {
	t.Parallel()
	const key = "SECRETKEY0123456789"
	// Nothing listens on port 1: every call to it fails to connect.
	keyed := "http://127.0.0.1:1/v3/" + key + "?apikey=" + key
	tests := []struct {
		name string
		// endpoint is the address the service is configured with.
		endpoint func(t *testing.T) string
		wantHost string
	}{
		{"in the endpoint's address", func(*testing.T) string { return keyed }, "127.0.0.1:1"},
		{"in the address of a gateway's upstream", func(t *testing.T) string {
			gateway, err := faultproxy.Start(keyed)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(gateway.Close)
			return gateway.URL()
		}, "502 Bad Gateway"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			raw := tc.endpoint(t)
			spans := tracetest.NewSpanRecorder()
			tracer := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)).Tracer("test")
			rpcChain, err := chain.DialRPC(context.Background(), raw, chain.WithTracer(tracer))
			if err != nil {
				if strings.Contains(err.Error(), key) {
					t.Fatalf("dial error names the key: %v", err)
				}
				t.Fatal(err)
			}
			m := newMulti(t, []chain.Endpoint{{Name: chain.EndpointName(0, raw), Chain: rpcChain}}, chain.MultiChainConfig{ReadTimeout: time.Second, SendTimeout: time.Second})
			_, headErr := m.LatestHeader(context.Background())
			_, sendErr := m.SendRawTransactions(context.Background(), [][]byte{{0x01}})
			_, identityErr := m.VerifyIdentity(context.Background())
			if headErr == nil || !strings.Contains(headErr.Error(), tc.wantHost) {
				t.Fatalf("head: %v, want a failure naming %s", headErr, tc.wantHost)
			}
			for _, err := range []error{identityErr, headErr, sendErr} {
				if err != nil && strings.Contains(err.Error(), key) {
					t.Fatalf("error %v names the key", err)
				}
			}
			if sendErr == nil {
				t.Fatal("the broadcast did not fail: this case tests nothing")
			}
			for _, h := range m.Health() {
				if h.LastError == "" || strings.Contains(h.LastError, key) {
					t.Fatalf("endpoint health %+v: want the failure without the key", h)
				}
			}
			failed := 0
			for _, span := range spans.Ended() {
				if span.Status().Code == codes.Error {
					failed++
				}
				if strings.Contains(span.Status().Description, key) {
					t.Fatalf("span %s records the key: %q", span.Name(), span.Status().Description)
				}
			}
			if failed == 0 {
				t.Fatal("no span recorded a failure: this case tests nothing")
			}
		})
	}
}

// The pending nonce a quarantine is decided by is the highest any endpoint reports: a
// signer's transactions may wait in one node's pool only, and the other answers lower.
func TestHighestPendingNonceIsAskedOfEveryEndpoint(t *testing.T) {
	t.Parallel()
	withPool := newSimulated(t, chain.SimulatedConfig{DevAccounts: 1})
	without := newSimulated(t, chain.SimulatedConfig{DevAccounts: 1})
	key := withPool.DevKeys()[0]
	ctx := testContext(t)
	for nonce := range uint64(3) {
		_, raw := transfer(t, withPool, key, nonce)
		sendRaw(t, ctx, withPool, raw)
	}
	account := withPool.DevAddresses()[0]
	m := newMulti(t, []chain.Endpoint{{Name: "without", Chain: without.RPCChain}, {Name: "with-pool", Chain: withPool.RPCChain}}, chain.MultiChainConfig{ReadTimeout: timeout})
	first, err := m.PendingNonceAt(ctx, account)
	if err != nil {
		t.Fatal(err)
	}
	highest, err := m.HighestPendingNonceAt(ctx, account)
	if err != nil || highest != 3 {
		t.Fatalf("HighestPendingNonceAt = %d, %v; want 3 (the first endpoint alone answers %d)", highest, err, first)
	}
}

// A block that also holds a transaction of a kind go-ethereum does not decode (an OP-stack
// deposit) from the signer's own address does not fail the scans for what the signer sent:
// its own transactions are found beside it. Before, the whole block failed to decode, and a
// recovery could never get past it.
func TestScansForSentTransactionsPassForeignTransactionKinds(t *testing.T) {
	t.Parallel()
	sim := newSimulated(t, chain.SimulatedConfig{DevAccounts: 1, HTTPAddr: "127.0.0.1:0"})
	ctx := testContext(t)
	key, from := sim.DevKeys()[0], sim.DevAddresses()[0]
	tx, raw := transfer(t, sim, key, 0)
	sendRaw(t, ctx, sim, raw)
	sim.Commit()
	proxies, endpoints := faultyEndpoints(t, sim, 1)
	address := strings.ToLower(from.Hex())
	proxies[0].SetDepositsFrom(&address)
	rpc := endpoints[0].Chain
	found, err := rpc.SentTransactions(ctx, from, []uint64{0}, 4)
	if err != nil || found[0].Hash != tx.Hash() {
		t.Fatalf("the signer's transaction at nonce 0 beside a deposit: %+v, %v; want %s", found, err, tx.Hash())
	}
	scan, err := rpc.ScanSent(ctx, from, 0, 10, 0, 10)
	if err != nil || len(scan.Txs) != 1 || scan.Txs[0].Hash != tx.Hash() {
		t.Fatalf("a scan from the first block: %+v, %v; want the signer's one transaction", scan, err)
	}
}
