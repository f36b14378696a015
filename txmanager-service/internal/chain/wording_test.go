package chain_test

import (
	"errors"
	"math/big"
	"net/http"
	"strings"
	"testing"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/params"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/services"
)

// Besu answers a gas limit above the block's under -32005, the code providers throttle
// with. Read as throttling, the whole batch's answers were thrown away, the endpoint was
// left alone for a second, and the transaction was never found not mineable. Here the
// node's real refusal of a real batch comes back in Besu's words: each broadcast gets its
// own answer and the endpoint stays in use.
func TestARefusalUnderTheRateLimitsCodeIsTheNodesAnswer(t *testing.T) {
	t.Parallel()
	sim := newSimulated(t, chain.SimulatedConfig{DevAccounts: 1, HTTPAddr: "127.0.0.1:0", GasLimit: 10_000_000})
	proxies, endpoints := faultyEndpoints(t, sim, 1)
	proxies[0].SetErrorWording(func(code int, message string) (int, string, bool) {
		if strings.Contains(message, "exceeds block gas limit") {
			return -32005, "Transaction gas limit exceeds block gas limit", true
		}
		return code, message, false
	})
	m := newMulti(t, endpoints, chain.MultiChainConfig{ReadTimeout: timeout, SendTimeout: timeout, ReceiptsTimeout: timeout, MaxLagBlocks: 3})
	key := sim.DevKeys()[0]
	to := common.HexToAddress("0x000000000000000000000000000000000000dEaD")
	_, first := transfer(t, sim, key, 0)
	_, tooLarge := signTx(t, key, txParams{nonce: 1, to: &to, value: big.NewInt(1), gas: 12_000_000,
		feeCap: big.NewInt(10 * params.GWei), tipCap: big.NewInt(params.GWei)})
	_, third := transfer(t, sim, key, 2)
	errs, err := m.SendRawTransactions(testContext(t), [][]byte{first, tooLarge, third})
	if err != nil {
		t.Fatalf("a batch with one transaction above the block's gas limit, in Besu's words: %v, want each broadcast answered", err)
	}
	if errs[0] != nil || !errors.Is(errs[1], services.ErrNotMineable) || !strings.Contains(errs[1].Error(), "Transaction gas limit exceeds block gas limit") || errs[2] != nil {
		t.Fatalf("answers %v, want nil, not mineable in Besu's words, nil", errs)
	}
	if h := m.Health()[0]; !h.Reachable || !h.LimitedUntil.IsZero() {
		t.Fatalf("the endpoint after the node's refusal: %+v, want it reachable and not paused", h)
	}
}

// A gateway that allows a list of methods may refuse eth_getHeaderByNumber with an HTTP
// status instead of a JSON-RPC error. The endpoint is then asked with eth_getBlockByNumber,
// as a node without the method is; before, every head read and probe failed there, and the
// endpoint was never usable.
func TestAHeaderMethodRefusedWithAnHTTPStatusFallsBackToBlocks(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusBadRequest, http.StatusNotFound, http.StatusMethodNotAllowed} {
		t.Run(http.StatusText(status), func(t *testing.T) {
			t.Parallel()
			sim := newSimulated(t, chain.SimulatedConfig{DevAccounts: 1, HTTPAddr: "127.0.0.1:0"})
			proxies, endpoints := faultyEndpoints(t, sim, 1)
			proxies[0].RefuseMethodWithStatus("eth_getHeaderByNumber", status)
			ctx := testContext(t)
			for i := range 2 {
				before := proxies[0].Requests()
				header, err := endpoints[0].Chain.LatestHeader(ctx)
				if err != nil {
					t.Fatalf("head read %d through a gateway that refuses the header method with %d: %v", i, status, err)
				}
				if header.Number == 0 && header.Hash == (common.Hash{}) {
					t.Fatalf("head read %d: an empty header", i)
				}
				if i == 1 && proxies[0].Requests()-before != 1 {
					t.Fatalf("the second head read took %d requests, want 1 (the endpoint remembers the block method)", proxies[0].Requests()-before)
				}
			}
		})
	}
}
