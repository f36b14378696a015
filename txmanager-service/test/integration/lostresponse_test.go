package integration

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/test/e2e"
)

// responseDroppingProxy forwards JSON-RPC to a node, but for the first N
// eth_sendRawTransaction calls it throws the node's answer away and fails the request: the
// node has the transaction, the service does not know it.
type responseDroppingProxy struct {
	target  string
	drop    atomic.Int32
	dropped atomic.Int32
	// hideReceipts fails receipt look-ups, holding the service back from noticing a mined
	// transaction before it rebroadcasts it.
	hideReceipts atomic.Bool
}

func (p *responseDroppingProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if p.hideReceipts.Load() && strings.Contains(string(body), "eth_getTransactionReceipt") {
		http.Error(w, "receipts unavailable", http.StatusBadGateway)
		return
	}
	e2e.ForwardJSONRPC(w, r, p.target, body, func() bool {
		if strings.Contains(string(body), "eth_sendRawTransaction") && p.drop.Add(-1) >= 0 {
			p.dropped.Add(1)
			http.Error(w, "connection lost", http.StatusBadGateway) // the node did get it
			return true
		}
		return false
	})
}

// A broadcast whose response is lost is settled by hash on the rebroadcast ("already known"
// while pending, "nonce too low" once mined): no duplicate, no wrong state. On go-ethereum
// and on anvil alike.
func TestLostBroadcastResponseIsResolvedByHash(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		mineBetween bool // mine before the rebroadcast, so the node answers "nonce too low"
	}{
		{"rebroadcast while pending: already known", false},
		{"rebroadcast after mining: nonce too low", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			onEveryNode(t, 0, func(t *testing.T, sim devChain) {
				proxy := &responseDroppingProxy{target: sim.HTTPEndpoint()}
				proxy.drop.Store(1)
				proxy.hideReceipts.Store(tc.mineBetween)
				front := httptest.NewServer(proxy)
				t.Cleanup(front.Close)
				s := startService(t, serviceOptions{chain: sim, fastPipeline: true, configure: func(bc *conf.Bootstrap) {
					bc.Chain.RPCURL = front.URL
					bc.Resubmit.Interval = conf.Duration(700 * time.Millisecond)
				}})
				signer := sim.DevAddresses()[0].Hex()
				id := s.createOK(t, map[string]any{"signer": signer, "to": sim.DevAddresses()[7].Hex(), "value": "5", "gasLimit": 21000})
				waitFor(t, 20*time.Second, "the lost response recorded", func() bool { return s.tx(t, id).subState == "BROADCAST_FAILED" })
				if proxy.dropped.Load() != 1 {
					t.Fatalf("proxy dropped %d responses, want 1", proxy.dropped.Load())
				}
				if tc.mineBetween {
					// Mined, and one block more: only then does the pool answer "nonce too low".
					sim.Commit()
					sim.Commit()
				}
				waitFor(t, 20*time.Second, "the rebroadcast settled by hash", func() bool {
					r := s.tx(t, id)
					return r.attempts >= 2 && r.subState == "SUBMITTED"
				})
				proxy.hideReceipts.Store(false)
				for range 5 {
					sim.Commit()
				}
				waitFor(t, 20*time.Second, "confirmed", func() bool { return s.tx(t, id).state == "CONFIRMED" })
				r := s.tx(t, id)
				if n := s.count(t, "SELECT count(*) FROM tx_attempt WHERE tx_id = $1", id); n != 1 {
					t.Fatalf("attempts recorded = %d, want 1 (same signed bytes)", n)
				}
				nonce, err := sim.NonceAt(t.Context(), sim.DevAddresses()[0])
				if err != nil || nonce != 1 {
					t.Fatalf("on-chain nonce of the signer = %d (%v), want 1: exactly one transaction mined", nonce, err)
				}
				receipts, err := sim.TransactionReceipts(t.Context(), []common.Hash{common.HexToHash(r.txHash)})
				if err != nil || receipts[0].Receipt == nil || receipts[0].Receipt.Status != 1 {
					t.Fatalf("receipt of the recorded hash %s: %+v %v", r.txHash, receipts, err)
				}
			})
		})
	}
}
