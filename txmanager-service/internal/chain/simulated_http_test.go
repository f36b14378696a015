package chain_test

import (
	"net"
	"strings"
	"testing"

	"github.com/bionicotaku/txmanager-service/internal/chain"
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
