package integration

import (
	"context"
	"fmt"
	"math/big"
	"net/http"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/crypto"
	"github.com/ethereum/go-ethereum/params"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/conf"
)

// A nonce hole made outside the service: a transaction sent with the signer's key from
// elsewhere moves the chain's pending nonce, the service allocates past it, and then that
// transaction is dropped (the node's pool is emptied). The nonce below the service's own
// transaction is held by nothing; the service fills it with a placeholder after the grace
// period, the waiting transaction confirms, and the feed marks the placeholder. On
// go-ethereum and on anvil alike.
func TestNonceHoleIsFilled(t *testing.T) {
	t.Parallel()
	onEveryNode(t, 0, nonceHoleIsFilled) // blocks only when the test commits them
}

func nonceHoleIsFilled(t *testing.T, sim devChain) {
	s := startService(t, serviceOptions{chain: sim, signers: 1, fastPipeline: true, chainQuery: true, configure: func(bc *conf.Bootstrap) {
		bc.Nonce.HoleGrace = conf.Duration(time.Second)
	}})
	ctx := context.Background()
	key := sim.DevKeys()[0]
	signer := crypto.PubkeyToAddress(key.PublicKey)
	first, err := sim.PendingNonceAt(ctx, signer)
	if err != nil {
		t.Fatal(err)
	}

	// Outside the service: a transfer at the signer's next nonce, pending.
	outside, err := types.SignNewTx(key, types.LatestSignerForChainID(big.NewInt(chain.SimulatedChainID)), &types.DynamicFeeTx{
		ChainID: big.NewInt(chain.SimulatedChainID), Nonce: first, Gas: 21000, To: &signer,
		GasTipCap: big.NewInt(params.GWei), GasFeeCap: big.NewInt(100 * params.GWei), Value: big.NewInt(1),
	})
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := outside.MarshalBinary()
	if err := sim.SendRawTransaction(ctx, raw); err != nil {
		t.Fatal(err)
	}
	id := s.createOK(t, map[string]any{"signer": signer.Hex(), "to": devAddress(t, 5), "value": "7", "gasLimit": 21000})
	waitFor(t, 30*time.Second, "the service's transaction broadcast", func() bool { return s.tx(t, id).state == "TRACKING" })
	var nonce uint64
	if err := s.pool.QueryRow(ctx, "SELECT nonce FROM managed_tx WHERE tx_id = $1", id).Scan(&nonce); err != nil {
		t.Fatal(err)
	}
	if nonce != first+1 {
		t.Fatalf("the service allocated nonce %d, want %d (past the outside transaction)", nonce, first+1)
	}

	// The outside transaction is dropped with everything pending; blocks resume.
	dropPending(t, sim)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
				sim.Commit()
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })

	waitFor(t, 60*time.Second, "the waiting transaction confirmed", func() bool { return s.tx(t, id).state == "CONFIRMED" })
	var placeholder string
	if err := s.pool.QueryRow(ctx, "SELECT state FROM managed_tx WHERE signer = $1 AND nonce = $2 AND placeholder", signer.Hex(), first).Scan(&placeholder); err != nil {
		t.Fatalf("no placeholder at nonce %d: %v", first, err)
	}
	if placeholder != "CONFIRMED" {
		t.Fatalf("placeholder is %s", placeholder)
	}
	waitFor(t, 30*time.Second, "the placeholder in the feed, marked", func() bool {
		a := s.do(t, http.MethodGet, "/api/v1/tx/completions?limit=100", nil)
		items, _ := a.body["completions"].([]any)
		for _, it := range items {
			c, _ := it.(map[string]any)
			if c["nonce"] == fmt.Sprint(first) && c["placeholder"] == true {
				return true
			}
		}
		return false
	})
	if filled := s.metricSums(t)["nonce_hole_filled_total"]; filled != 1 {
		t.Fatalf("nonce_hole_filled_total = %v, want 1", filled)
	}
}
