package chain_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/test/faultproxy"
)

func TestSimulatedServesJSONRPCOverHTTP(t *testing.T) {
	sim := newSimulated(t, chain.SimulatedConfig{DevAccounts: 1, HTTPAddr: "127.0.0.1:0"})
	ctx := testContext(t)

	endpoint := sim.HTTPEndpoint()
	if !strings.HasPrefix(endpoint, "http://127.0.0.1:") || strings.HasSuffix(endpoint, ":0") {
		t.Fatalf("HTTPEndpoint = %q, want http://127.0.0.1:<chosen port>", endpoint)
	}
	remote, err := chain.DialRPC(ctx, endpoint)
	if err != nil {
		t.Fatalf("DialRPC: %v", err)
	}
	t.Cleanup(remote.Close)

	id, err := remote.ChainID(ctx)
	if err != nil {
		t.Fatalf("ChainID over HTTP: %v", err)
	}
	if id.Int64() != chain.SimulatedChainID {
		t.Errorf("ChainID = %s, want %d", id, chain.SimulatedChainID)
	}

	// Over HTTP one batch is one POST, which is what the counter claims to count.
	blockHash := sim.Commit()
	before := remote.RequestCount()
	if _, err := remote.TransactionReceipts(ctx, unknownHashes(250)); err != nil {
		t.Fatalf("TransactionReceipts over HTTP: %v", err)
	}
	if got := remote.RequestCount() - before; got != 3 {
		t.Errorf("250 receipts over HTTP cost %d requests, want 3", got)
	}
	latest, err := remote.LatestHeader(ctx)
	if err != nil || latest.Hash != blockHash {
		t.Errorf("LatestHeader over HTTP = %+v, %v; want block %s", latest, err, blockHash)
	}
}

func TestSimulatedWithoutHTTPAddrHasNoEndpoint(t *testing.T) {
	sim := newSimulated(t, chain.SimulatedConfig{DevAccounts: 1})
	if got := sim.HTTPEndpoint(); got != "" {
		t.Errorf("HTTPEndpoint = %q, want empty", got)
	}
}

func TestSimulatedRejectsBadHTTPAddr(t *testing.T) {
	for _, addr := range []string{"127.0.0.1", "127.0.0.1:notaport", "127.0.0.1:70000"} {
		sim, err := chain.NewSimulated(chain.SimulatedConfig{DevAccounts: 1, HTTPAddr: addr})
		if err == nil {
			sim.Close()
			t.Errorf("HTTPAddr %q accepted, want an error", addr)
		}
	}
}

func TestSimulatedReportsBusyHTTPPortAsError(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Close() })

	sim, err := chain.NewSimulated(chain.SimulatedConfig{DevAccounts: 1, HTTPAddr: busy.Addr().String()})
	if err == nil {
		sim.Close()
		t.Fatalf("started on busy address %s, want an error", busy.Addr())
	}
	t.Logf("busy port: %v", err)
}

// The pipeline calls a node from many goroutines at once. Over HTTP the client keeps
// enough connections alive between rounds of such calls to reuse them, instead of
// opening (and closing) a TCP connection for every call beyond Go's default two.
func TestRPCReusesConnectionsAcrossConcurrentCalls(t *testing.T) {
	sim := newSimulated(t, chain.SimulatedConfig{DevAccounts: 1, HTTPAddr: "127.0.0.1:0"})
	ctx := testContext(t)
	proxy, err := faultproxy.Start(sim.HTTPEndpoint())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	remote, err := chain.DialRPC(ctx, proxy.URL())
	if err != nil {
		t.Fatalf("DialRPC: %v", err)
	}
	t.Cleanup(remote.Close)

	const concurrent, rounds = 32, 5
	account := sim.DevAddresses()[0]
	for range rounds {
		var calls sync.WaitGroup
		errs := make(chan error, concurrent)
		for range concurrent {
			calls.Go(func() {
				if _, err := remote.BalanceAt(ctx, account); err != nil {
					errs <- err
				}
			})
		}
		calls.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("BalanceAt: %v", err)
		}
	}
	// At most one connection per call in flight, opened in the first round and reused
	// after; without reuse each later round opens about concurrent-2 more (150 in all).
	if got := proxy.Connections(); got > 2*concurrent {
		t.Errorf("%d rounds of %d concurrent calls opened %d connections, want at most %d", rounds, concurrent, got, 2*concurrent)
	}
	t.Logf("%d rounds of %d concurrent calls: %d connections", rounds, concurrent, proxy.Connections())

	// Closing the chain closes them: a kept-alive connection left open would hold up the
	// node's shutdown (5 s for one that never carried a request).
	remote.Close()
	deadline := time.Now().Add(5 * time.Second)
	for proxy.OpenConnections() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if open := proxy.OpenConnections(); open != 0 {
		t.Errorf("%d connections still open after Close, want 0", open)
	}
}

// TestRPCAsksForCompressedAnswersOnlyWhenTold runs the node's own HTTP server (geth's,
// which gzips whenever asked) behind a recording proxy: by default the client must not ask,
// so neither side spends CPU on it; with the option it asks and reads the gzipped answers.
func TestRPCAsksForCompressedAnswersOnlyWhenTold(t *testing.T) {
	sim := newSimulated(t, chain.SimulatedConfig{DevAccounts: 1, HTTPAddr: "127.0.0.1:0"})
	ctx := testContext(t)
	node, err := url.Parse(sim.HTTPEndpoint())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var asked, answered []string
	proxy := httputil.NewSingleHostReverseProxy(node)
	proxy.ModifyResponse = func(resp *http.Response) error {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, resp.Request.Header.Get("Accept-Encoding"))
		answered = append(answered, resp.Header.Get("Content-Encoding"))
		return nil
	}
	server := httptest.NewServer(proxy)
	t.Cleanup(server.Close)

	for _, tc := range []struct {
		name     string
		opts     []chain.RPCOption
		wantGzip bool
	}{
		{name: "default", wantGzip: false},
		{name: "compression off", opts: []chain.RPCOption{chain.WithResponseCompression(false)}, wantGzip: false},
		{name: "compression on", opts: []chain.RPCOption{chain.WithResponseCompression(true)}, wantGzip: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			asked, answered = nil, nil
			mu.Unlock()
			remote, err := chain.DialRPC(ctx, server.URL, tc.opts...)
			if err != nil {
				t.Fatalf("DialRPC: %v", err)
			}
			defer remote.Close()
			// A batch answer large enough for geth's gzip to be worth a look.
			if _, err := remote.TransactionReceipts(ctx, unknownHashes(50)); err != nil {
				t.Fatalf("TransactionReceipts: %v", err)
			}
			if id, err := remote.ChainID(ctx); err != nil || id.Int64() != chain.SimulatedChainID {
				t.Fatalf("ChainID = %v, %v; want %d", id, err, chain.SimulatedChainID)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(asked) == 0 {
				t.Fatal("no request went through the proxy")
			}
			for i := range asked {
				gotAsk := strings.Contains(asked[i], "gzip")
				gotGzip := answered[i] == "gzip"
				if gotAsk != tc.wantGzip || gotGzip != tc.wantGzip {
					t.Errorf("request %d: Accept-Encoding %q, answer Content-Encoding %q; want gzip asked and answered = %v", i, asked[i], answered[i], tc.wantGzip)
				}
			}
		})
	}
}

// TestHeadersAreAskedForWithoutTheBlocksTransactions runs geth's own HTTP server behind a
// proxy that records each JSON-RPC method: every header the service reads (head, heights,
// finalized, fee suggestion) must be asked for with eth_getHeaderByNumber, whose answer
// leaves out the transaction hashes of a full block, and must be the header geth reports
// for the block.
func TestHeadersAreAskedForWithoutTheBlocksTransactions(t *testing.T) {
	sim := newSimulated(t, chain.SimulatedConfig{DevAccounts: 1, HTTPAddr: "127.0.0.1:0"})
	ctx := testContext(t)
	key := sim.DevKeys()[0]
	for nonce := range uint64(20) {
		_, raw := transfer(t, sim, key, nonce)
		sendRaw(t, ctx, sim, raw)
	}
	full := sim.Commit()
	node, err := url.Parse(sim.HTTPEndpoint())
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var methods []string
	proxy := httputil.NewSingleHostReverseProxy(node)
	recorder := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var calls []struct {
			Method string `json:"method"`
		}
		if err := json.Unmarshal(body, &calls); err != nil { // not a batch: one call
			calls = calls[:0]
			var call struct {
				Method string `json:"method"`
			}
			_ = json.Unmarshal(body, &call)
			calls = append(calls, call)
		}
		mu.Lock()
		for _, c := range calls {
			methods = append(methods, c.Method)
		}
		mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(body))
		proxy.ServeHTTP(w, r)
	})
	server := httptest.NewServer(recorder)
	t.Cleanup(server.Close)
	remote, err := chain.DialRPC(ctx, server.URL)
	if err != nil {
		t.Fatalf("DialRPC: %v", err)
	}
	t.Cleanup(remote.Close)

	latest, err := remote.LatestHeader(ctx)
	if err != nil || latest.Hash != full {
		t.Fatalf("LatestHeader = %+v, %v; want the block of the 20 transfers, %s", latest, err, full)
	}
	headers, err := remote.HeadersByNumber(ctx, []uint64{0, latest.Number})
	if err != nil || headers[1] == nil || headers[1].Hash != full || headers[0] == nil || headers[0].Number != 0 {
		t.Fatalf("HeadersByNumber = %+v, %v; want genesis and %s", headers, err, full)
	}
	if headers[1].ParentHash != headers[0].Hash && latest.Number == 1 {
		t.Errorf("block 1's parent %s is not genesis %s", headers[1].ParentHash, headers[0].Hash)
	}
	if _, err := remote.FinalizedHeader(ctx); err != nil && !errors.Is(err, services.ErrNotSupported) {
		t.Fatalf("FinalizedHeader: %v", err)
	}
	fees, err := remote.SuggestFees(ctx)
	if err != nil || fees.BaseFee == nil || fees.BaseFee.Sign() <= 0 {
		t.Fatalf("SuggestFees = %+v, %v; want the latest block's base fee", fees, err)
	}

	mu.Lock()
	defer mu.Unlock()
	counts := map[string]int{}
	for _, m := range methods {
		counts[m]++
	}
	if counts["eth_getBlockByNumber"] != 0 || counts["eth_getHeaderByNumber"] != 5 {
		t.Errorf("methods asked: %v; want 5 eth_getHeaderByNumber (latest, two heights, finalized, fees) and no eth_getBlockByNumber", counts)
	}
}
