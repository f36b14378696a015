package integration

import (
	"context"
	"fmt"
	"math/big"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/conf"
)

// sealedChain is go-ethereum's simulated chain whose blocks the test seals: nothing is mined
// until it says so.
func sealedChain(t *testing.T, blockGas uint64) *chain.SimulatedChain {
	t.Helper()
	sim, err := chain.NewSimulated(chain.SimulatedConfig{DevAccounts: 8, HTTPAddr: "127.0.0.1:0", GasLimit: blockGas, TxPoolSlots: 4096})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	sim.Commit()
	return sim
}

// newestAttempt is the kind, gas limit and fee cap of the transaction's newest attempt of
// one of kinds.
func (s *testService) newestAttempt(t *testing.T, txID string, kinds ...string) (kind string, gas int64, maxFee *big.Int) {
	t.Helper()
	var fee string
	err := s.pool.QueryRow(t.Context(), `SELECT kind, gas_limit, max_fee_per_gas::text FROM tx_attempt WHERE tx_id = $1 AND kind = ANY($2)
		ORDER BY created_at DESC LIMIT 1`, txID, kinds).Scan(&kind, &gas, &fee)
	if err != nil {
		return "", 0, nil
	}
	maxFee, _ = new(big.Int).SetString(fee, 10)
	return kind, gas, maxFee
}

func (s *testService) resolve(t *testing.T, txID, action string) {
	t.Helper()
	r := s.do(t, http.MethodPost, "/api/v1/admin/tx/"+txID+"/resolve", []byte(`{"action":"`+action+`","reason":"ops ticket 12"}`))
	if r.status != http.StatusOK {
		t.Fatalf("resolve %s with %s: %d %s", txID, action, r.status, r.raw)
	}
}

// An operator's REPLACE after a CANCEL signs the intent again with the gas limit the intent
// was signed with, not the cancellation's: with call data, 21,000 gas would not even pay
// for the data (the node refuses it as intrinsic gas too low), and a call needing more would
// run out of gas, its fee paid and its intent never run.
func TestAReplaceAfterACancelRunsTheIntentWithItsOwnGasLimit(t *testing.T) {
	t.Parallel()
	sim := sealedChain(t, 30_000_000)
	s := startService(t, serviceOptions{chain: sim, signers: 1, fastPipeline: true, configure: func(bc *conf.Bootstrap) {
		bc.Stuck.MinAge = conf.Duration(time.Hour) // the operator acts, not the detector
	}})
	data := "0x" + strings.Repeat("ab", 68)
	id := s.createOK(t, map[string]any{"signer": devAddress(t, 0), "to": devAddress(t, 7), "value": "1", "data": data, "gasLimit": 40_000})
	waitFor(t, 30*time.Second, "the transaction broadcast", func() bool { return s.tx(t, id).state == "TRACKING" })

	s.resolve(t, id, "CANCEL")
	waitFor(t, 30*time.Second, "the cancellation signed", func() bool { kind, _, _ := s.newestAttempt(t, id, "CANCEL"); return kind == "CANCEL" })
	s.resolve(t, id, "REPLACE")
	waitFor(t, 30*time.Second, "the replacement signed", func() bool { kind, _, _ := s.newestAttempt(t, id, "REPLACE"); return kind == "REPLACE" })
	if _, gas, _ := s.newestAttempt(t, id, "REPLACE"); gas != 40_000 {
		t.Fatalf("the replacement after a cancellation was signed with %d gas, want the intent's 40000", gas)
	}
	waitFor(t, 60*time.Second, "the replacement mined and confirmed", func() bool {
		sim.Commit()
		return s.tx(t, id).state == "CONFIRMED"
	})
	if row := s.tx(t, id); row.subState == "CANCELLED" {
		t.Fatalf("the intent ended %s/%s, want its replacement confirmed", row.state, row.subState)
	}
}

// A cancellation of an intent stuck under its own low fee cap is re-priced as the market
// rises, like any attempt the service priced: the intent's cap binds the intent's attempts
// only. Before, it was held to the intent's cap, so it went out unchanged at every
// resubmission and the signer's later nonces waited for the stuck detector or a person.
func TestACancellationIsRepricedAboveTheCapOfTheIntentItCancels(t *testing.T) {
	t.Parallel()
	const blockGas = 1_000_000
	sim := sealedChain(t, blockGas)
	s := startService(t, serviceOptions{chain: sim, signers: 1, fastPipeline: true, configure: func(bc *conf.Bootstrap) {
		bc.Stuck.MinAge = conf.Duration(time.Hour)
		bc.Resubmit.Interval = conf.Duration(300 * time.Millisecond)
	}})
	id := s.createOK(t, map[string]any{"signer": devAddress(t, 0), "to": devAddress(t, 7), "value": "1", "gasLimit": 21_000,
		"maxFeePerGas": "1", "maxPriorityFeePerGas": "1"})
	waitFor(t, 30*time.Second, "the transaction broadcast", func() bool { return s.tx(t, id).state == "TRACKING" })
	s.resolve(t, id, "CANCEL")
	var first *big.Int
	waitFor(t, 30*time.Second, "the cancellation signed", func() bool { _, _, first = s.newestAttempt(t, id, "CANCEL"); return first != nil })

	// Full blocks until the base fee is above the cancellation's fee cap: it can no longer
	// be mined as signed.
	ctx := context.Background()
	sp := &spammer{sim: sim, key: sim.DevKeys()[7]}
	for {
		if err := sp.block(ctx, blockGas-10_000); err != nil {
			t.Fatal(err)
		}
		fees, err := sim.SuggestFees(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if fees.BaseFee.Cmp(first) > 0 {
			break
		}
	}
	waitFor(t, 30*time.Second, fmt.Sprintf("the cancellation re-priced above its first fee cap (%s wei)", first), func() bool {
		_, _, now := s.newestAttempt(t, id, "CANCEL")
		return now != nil && now.Cmp(first) > 0
	})
	waitFor(t, 60*time.Second, "the cancellation mined", func() bool {
		sim.Commit()
		return s.tx(t, id).state == "FAILED_FINAL"
	})
	if row := s.tx(t, id); row.subState != "CANCELLED" {
		t.Fatalf("ended %s/%s, want FAILED_FINAL/CANCELLED", row.state, row.subState)
	}
}
