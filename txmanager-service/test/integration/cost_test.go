package integration

import (
	"context"
	"fmt"
	"math/big"
	"net/http"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
)

// What each transaction cost is on its receipt and in the completions feed, and the figures
// reconcile with the chain, on go-ethereum and on anvil:
// over 100 transfers from one signer, the values sent plus the fees the service reports
// equal the signer's balance change to the wei.
func TestReportedFeesReconcileWithTheSignersBalance(t *testing.T) {
	t.Parallel()
	onEveryNode(t, 250*time.Millisecond, reportedFeesReconcile)
}

func reportedFeesReconcile(t *testing.T, sim devChain) {
	ctx := context.Background()
	s := startService(t, serviceOptions{chain: sim, signers: 1, fastPipeline: true})
	signer := devAddress(t, 0)
	account := common.HexToAddress(signer)
	before, err := sim.BalanceAt(ctx, account)
	if err != nil {
		t.Fatal(err)
	}
	const transfers = 100
	var ids []string
	sent := new(big.Int)
	for i := range transfers {
		value := int64(1_000_000 + i)
		ids = append(ids, s.createOK(t, map[string]any{"signer": signer, "to": devAddress(t, 4), "value": fmt.Sprint(value), "gasLimit": 21000}))
		sent.Add(sent, big.NewInt(value))
	}
	for _, id := range ids {
		waitFor(t, 60*time.Second, "transaction "+id+" confirmed", func() bool { return s.tx(t, id).state == "CONFIRMED" })
	}
	fees := new(big.Int)
	for _, id := range ids {
		res := s.do(t, http.MethodGet, "/api/v1/tx/"+id, nil)
		receipt, _ := res.body["receipt"].(map[string]any)
		if res.status != http.StatusOK || receipt == nil {
			t.Fatalf("GET %s: %d %s", id, res.status, res.raw)
		}
		gasUsed, _ := new(big.Int).SetString(fmt.Sprint(receipt["gasUsed"]), 10)
		price, okPrice := new(big.Int).SetString(fmt.Sprint(receipt["effectiveGasPrice"]), 10)
		fee, okFee := new(big.Int).SetString(fmt.Sprint(receipt["fee"]), 10)
		if gasUsed == nil || !okPrice || !okFee || price.Sign() <= 0 {
			t.Fatalf("receipt of %s lacks its cost: %v", id, receipt)
		}
		if want := new(big.Int).Mul(gasUsed, price); fee.Cmp(want) != 0 {
			t.Fatalf("receipt of %s: fee %s, want gas used x effective price = %s", id, fee, want)
		}
		fees.Add(fees, fee)
	}
	after, err := sim.BalanceAt(ctx, account)
	if err != nil {
		t.Fatal(err)
	}
	spent := new(big.Int).Sub(before, after)
	if reported := new(big.Int).Add(sent, fees); reported.Cmp(spent) != 0 {
		t.Fatalf("the signer's balance fell by %s wei; values %s + reported fees %s = %s (off by %s)",
			spent, sent, fees, reported, new(big.Int).Sub(spent, reported))
	}
	// The completions feed carries the same fee for each.
	page := s.do(t, http.MethodGet, "/api/v1/tx/completions?limit=1000", nil)
	entries, _ := page.body["completions"].([]any)
	feedFees, counted := new(big.Int), 0
	for _, e := range entries {
		entry, _ := e.(map[string]any)
		fee, ok := new(big.Int).SetString(fmt.Sprint(entry["fee"]), 10)
		if !ok {
			t.Fatalf("completion without its fee: %v", entry)
		}
		feedFees.Add(feedFees, fee)
		counted++
	}
	if counted != transfers || feedFees.Cmp(fees) != 0 {
		t.Fatalf("the feed has %d completions with fees %s; want %d with %s, as the receipts say", counted, feedFees, transfers, fees)
	}
	t.Logf("%d transfers: balance change %s wei = values %s + fees %s, to the wei; the feed's fees agree", transfers, spent, sent, fees)
}
