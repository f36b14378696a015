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
	"github.com/bionicotaku/txmanager-service/test/e2e"
	"github.com/bionicotaku/txmanager-service/test/faultproxy"
)

// A node whose pool is full, among two endpoints: every broadcast it refuses goes to the
// other endpoint at once, so every transaction confirms with its first signed attempt and
// no broadcast is ever recorded as failed or refused for a full pool.
func TestFullPoolOnOneEndpointSendsToTheOther(t *testing.T) {
	t.Parallel()
	sim, proxies := proxiedChain(t, 2)
	s := startService(t, serviceOptions{chain: sim, signers: 3, fastPipeline: true, configure: throughProxies(proxies, time.Second)})
	if err := proxies[0].SetMode(faultproxy.PoolFull); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 60 {
		ids = append(ids, s.createOK(t, map[string]any{"signer": devAddress(t, i%3), "to": devAddress(t, 5), "value": fmt.Sprint(i + 1), "gasLimit": 21000}))
	}
	for _, id := range ids {
		waitFor(t, 60*time.Second, "transaction "+id+" confirmed", func() bool { return s.tx(t, id).state == "CONFIRMED" })
	}
	if proxies[0].RefusedSends() == 0 {
		t.Fatal("the full endpoint was never asked to broadcast: the test proves nothing")
	}
	// A rebroadcast of the same bytes (a slow machine can take longer than the resubmit
	// interval to mine one) is no failure; a replacement or a failed broadcast would be.
	if n := s.count(t, "SELECT count(*) FROM tx_attempt"); n != 60 {
		t.Fatalf("%d attempts signed for 60 transactions", n)
	}
	for _, result := range []string{"pool_full", "error"} {
		if n := s.metricSumsWhere(t, `result="`+result+`"`)["tx_submit_total"]; n != 0 {
			t.Fatalf("tx_submit_total{result=%s} = %v: a full pool on one endpoint was taken as the answer", result, n)
		}
	}
	t.Logf("60 transactions confirmed with their first attempt, no broadcast failed; the full endpoint refused %d broadcast requests", proxies[0].RefusedSends())
}

// Arbitrum counts the L1 part of a transaction's cost as gas and refuses a gas limit short
// of it as "intrinsic gas too low", the words of a limit below what the EVM itself charges.
// While the node answers so (the fault proxy in front of go-ethereum answers every
// broadcast as Nitro does while the L1 price is up), transfers whose 21000 gas covers the
// EVM's charge are recorded L1_GAS_SHORT and broadcast again at each interval, never
// cancelled; once the node takes them they confirm.
func TestGasShortOfTheL1PartIsBroadcastAgainNotCancelled(t *testing.T) {
	t.Parallel()
	s, proxy := l1ShortService(t, func(st *conf.Stuck) { st.MinAge = conf.Duration(time.Hour) })
	signer := devAddress(t, 0)
	first := s.createOK(t, map[string]any{"signer": signer, "to": devAddress(t, 5), "value": "1", "gasLimit": 21000})
	second := s.createOK(t, map[string]any{"signer": signer, "to": devAddress(t, 5), "value": "2", "gasLimit": 21000})
	waitFor(t, 30*time.Second, "both refused short of the L1 part three times", func() bool {
		return s.count(t, "SELECT count(*) FROM managed_tx WHERE sub_state = 'L1_GAS_SHORT' AND submit_attempts >= 3") == 2
	})
	if n := s.count(t, "SELECT count(*) FROM managed_tx WHERE state <> 'TRACKING'"); n != 0 {
		t.Fatalf("%d transactions left TRACKING while only the L1 part was short", n)
	}
	if n := s.count(t, "SELECT count(*) FROM stuck_resolution_audit"); n != 0 {
		t.Fatalf("%d resolutions recorded: a gas limit short of the L1 part was taken as never mineable", n)
	}
	lastError := fmt.Sprint(s.do(t, http.MethodGet, "/api/v1/tx/"+first, nil).body["lastError"])
	if !strings.Contains(lastError, "intrinsic gas too low") || !strings.Contains(lastError, "L1 part") {
		t.Fatalf("last error %q does not carry the node's words and what they mean here", lastError)
	}
	if n := s.metricSumsWhere(t, `result="l1_gas_short"`)["tx_submit_total"]; n == 0 {
		t.Fatal(`tx_submit_total{result="l1_gas_short"} is 0`)
	}
	refused := proxy.RefusedSends()
	if err := proxy.SetMode(faultproxy.Pass); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{first, second} {
		waitFor(t, 30*time.Second, "transaction "+id+" confirmed", func() bool { return s.tx(t, id).state == "CONFIRMED" })
	}
	t.Logf("%d broadcast requests refused as short of the L1 part; recorded L1_GAS_SHORT (%s), then both confirmed once the node took them", refused, lastError)
}

// A gas limit the L1 part does not fit is waited on for the stuck thresholds only: a limit
// it never fits (a plain 21000 on Arbitrum, where the L1 part is never nothing) would hold
// every nonce after it. Past them the head of line is cancelled whatever the stuck hook
// says, as a transaction no node takes is, and ends FAILED_FINAL / CANCELLED with the
// reason on record.
func TestGasShortOfTheL1PartIsCancelledPastTheStuckThresholds(t *testing.T) {
	t.Parallel()
	s, proxy := l1ShortService(t, func(st *conf.Stuck) { st.MinAge, st.MinAttempts = conf.Duration(time.Second), 2 })
	id := s.createOK(t, map[string]any{"signer": devAddress(t, 0), "to": devAddress(t, 5), "value": "1", "gasLimit": 21000})
	var reason string
	waitFor(t, 30*time.Second, "a cancellation recorded past the stuck thresholds", func() bool {
		err := s.pool.QueryRow(context.Background(), "SELECT reason FROM stuck_resolution_audit WHERE tx_id = $1 AND action = 'CANCEL'", id).Scan(&reason)
		return err == nil
	})
	if !strings.Contains(reason, "L1 part") || !strings.Contains(reason, "intrinsic gas too low") {
		t.Fatalf("the cancellation's reason %q does not say why", reason)
	}
	// The node takes the cancellation (priced by its estimate on Arbitrum).
	if err := proxy.SetMode(faultproxy.Pass); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the transaction final", func() bool { return s.tx(t, id).state == "FAILED_FINAL" })
	if sub := s.tx(t, id).subState; sub != "CANCELLED" {
		t.Fatalf("ended FAILED_FINAL / %s, want CANCELLED", sub)
	}
	t.Logf("cancelled past the stuck thresholds: %s", reason)
}

// A gas limit the service estimated on Arbitrum prices the L1 part at the L1 price of the
// create. When the price rises before the transaction is taken, the node refuses it short of
// the L1 part (the fault proxy in front of go-ethereum prices it as Nitro does). It is then
// signed again with the node's estimate now and a fifth more, at a fee cap per gas that keeps
// its worst-case fee within what it was admitted with, and confirms; before, it was broadcast
// again as it was until cancelled at the head of the line. A limit the client named is kept.
func TestAnEstimatedGasLimitTheL1PartOutgrewIsEstimatedAgain(t *testing.T) {
	t.Parallel()
	const (
		quoted, risen = 2_000, 9_000
		// Near the dev chain's market (a tip of 1 gwei): the cap binds the first attempt, and
		// the raised limit's lower cap binds the re-gassed one.
		maxFeePerGas = 1_000_000_000
	)
	sim, proxies := proxiedChain(t, 1)
	proxy := proxies[0]
	proxy.SetL1Gas(quoted, risen)
	if err := proxy.SetMode(faultproxy.L1Priced); err != nil {
		t.Fatal(err)
	}
	s := startService(t, serviceOptions{chain: sim, signers: 1, fastPipeline: true, configure: func(bc *conf.Bootstrap) {
		throughProxies(proxies, 2*time.Second)(bc)
		bc.Resubmit.Interval = conf.Duration(300 * time.Millisecond)
		bc.Stuck.MinAge = conf.Duration(time.Hour)
		bc.Fees.MaxFeePerGas = fmt.Sprint(maxFeePerGas)
	}})
	signer := devAddress(t, 0)
	estimated := s.createOK(t, map[string]any{"signer": signer, "to": devAddress(t, 5), "value": "1"})
	named := s.createOK(t, map[string]any{"signer": signer, "to": devAddress(t, 5), "value": "2", "gasLimit": 21_000 + quoted})
	waitFor(t, 30*time.Second, "both refused short of the L1 part", func() bool {
		return s.count(t, "SELECT count(*) FROM managed_tx WHERE sub_state = 'L1_GAS_SHORT'") == 2
	})
	proxy.SetL1Gas(risen, risen) // the node's estimate follows the price now
	waitFor(t, 30*time.Second, "the estimated one confirmed", func() bool { return s.tx(t, estimated).state == "CONFIRMED" })

	var gas, admitted, signedGas int64
	var maxFee string
	if err := s.pool.QueryRow(context.Background(), `SELECT a.gas_limit, a.max_fee_per_gas::text, (m.payload->>'effectiveGasLimit')::bigint,
			COALESCE((m.payload->>'signedGasLimit')::bigint, 0)
		FROM managed_tx m JOIN tx_attempt a ON a.tx_hash = m.tx_hash WHERE m.tx_id = $1`, estimated).Scan(&gas, &maxFee, &admitted, &signedGas); err != nil {
		t.Fatal(err)
	}
	// Estimates are padded by create.gasEstimateMultiplier (1.2 by default), the first and
	// the one made again alike.
	padded := func(estimate int64) int64 { return estimate * 6 / 5 }
	if gas != padded(21_000+risen) || admitted != padded(21_000+quoted) || signedGas != gas {
		t.Fatalf("confirmed with gas limit %d (admitted %d, kept for the funds check %d), want the padded estimate now, %d, beside the admitted %d",
			gas, admitted, signedGas, padded(21_000+risen), padded(21_000+quoted))
	}
	// The cap is lowered to the admitted bound at most; the market may ask for less (the dev
	// chain's base fee falls while its blocks are empty on a slow machine).
	fee, _ := new(big.Int).SetString(maxFee, 10)
	if worst := new(big.Int).Mul(fee, big.NewInt(gas)); worst.Cmp(big.NewInt(maxFeePerGas*admitted)) > 0 || fee.Int64() > maxFeePerGas*admitted/gas {
		t.Fatalf("re-gassed at a fee cap of %s wei, a worst-case fee of %s; want the cap at most %d so it stays within the %d admitted (gas limit x fee cap)",
			fee, worst, maxFeePerGas*admitted/gas, maxFeePerGas*admitted)
	}
	if n := s.count(t, "SELECT count(*) FROM tx_attempt WHERE tx_id = $1 AND gas_limit <> $2", named, 21_000+quoted); n != 0 {
		t.Fatalf("%d attempts of the transaction whose client named its gas limit carry another", n)
	}
	if row := s.tx(t, named); row.state != "TRACKING" || row.subState != "L1_GAS_SHORT" {
		t.Fatalf("the named limit's transaction is %s/%s, want TRACKING/L1_GAS_SHORT: still short, and not cancelled before the stuck thresholds", row.state, row.subState)
	}
	t.Logf("an estimated limit of %d refused short of the L1 part; confirmed with %d at a fee cap of %s wei", admitted, gas, maxFee)
}

// l1ShortService is a service of one signer whose only node (go-ethereum behind a fault
// proxy) answers every broadcast as Nitro does while the L1 part is above the gas limit,
// resubmitting every 300 ms, with the stuck thresholds stuck sets.
func l1ShortService(t *testing.T, stuck func(*conf.Stuck)) (*testService, *faultproxy.Proxy) {
	t.Helper()
	sim, proxies := proxiedChain(t, 1)
	s := startService(t, serviceOptions{chain: sim, signers: 1, fastPipeline: true, configure: func(bc *conf.Bootstrap) {
		throughProxies(proxies, 2*time.Second)(bc)
		bc.Resubmit.Interval = conf.Duration(300 * time.Millisecond)
		stuck(&bc.Stuck)
	}})
	if err := proxies[0].SetMode(faultproxy.L1GasShort); err != nil {
		t.Fatal(err)
	}
	return s, proxies[0]
}

// A gas limit above the latest block's is refused before a nonce. One that fits the block
// but that no node will take as signed is not rebroadcast forever holding up its signer:
// on go-ethereum (over its per-transaction cap, EIP-7825) and on anvil (its block gas
// limit lowered and its pool emptied, so the rebroadcast is refused) alike, once it heads
// the line a cancellation takes its nonce, it ends FAILED_FINAL with the node's reason on
// record, and the signer's next transaction confirms behind it.
func TestTransactionNoNodeTakesIsCancelled(t *testing.T) {
	t.Parallel()
	const blockGas, asked = 25_000_000, 20_000_000
	for _, client := range chainClients() {
		t.Run(client, func(t *testing.T) {
			t.Parallel()
			var c devChain
			if client == "anvil" {
				c = startAnvilChain(t, 0, "--gas-limit", fmt.Sprint(blockGas))
			} else {
				sim, err := chain.NewSimulated(chain.SimulatedConfig{DevAccounts: 8, HTTPAddr: "127.0.0.1:0", GasLimit: blockGas})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = sim.Close() })
				sim.Commit()
				c = sim
			}
			s := startService(t, serviceOptions{chain: c, signers: 1, fastPipeline: true, configure: func(bc *conf.Bootstrap) {
				bc.Resubmit.Interval = conf.Duration(500 * time.Millisecond)
				// Above EIP-7825's cap, which create.maxGasLimit holds to by default: the
				// transaction must reach the nodes for them to refuse it.
				bc.Create.MaxGasLimit = 30_000_000
			}})
			signer := c.DevAddresses()[0].Hex()

			above := s.create(t, map[string]any{"signer": signer, "to": devAddress(t, 5), "value": "1", "gasLimit": blockGas + 1})
			if msg, _ := above.body["message"].(string); above.status != http.StatusBadRequest || !strings.Contains(msg, "block's gas limit") {
				t.Fatalf("a gas limit above the block's: %d %s, want 400 naming the block's gas limit", above.status, above.raw)
			}
			if n := s.count(t, "SELECT count(*) FROM managed_tx"); n != 0 {
				t.Fatalf("the refused intent left %d rows", n)
			}

			tooBig := s.createOK(t, map[string]any{"signer": signer, "to": devAddress(t, 5), "value": "1", "gasLimit": asked})
			behind := s.createOK(t, map[string]any{"signer": signer, "to": devAddress(t, 5), "value": "2", "gasLimit": 21000})
			if anvil, ok := c.(*anvilChain); ok {
				// anvil took it (it has no per-transaction cap): the block gas limit drops
				// under it and the pool is emptied, so its rebroadcast is refused.
				waitFor(t, 20*time.Second, "both broadcast", func() bool { return s.tx(t, tooBig).state == "TRACKING" && s.tx(t, behind).state == "TRACKING" })
				if err := e2e.SetBlockGasLimit(context.Background(), anvil.url, blockGas/2); err != nil {
					t.Fatal(err)
				}
				dropPending(t, c)
			}
			stop := mineEvery(c, 200*time.Millisecond)
			t.Cleanup(stop)
			waitFor(t, 60*time.Second, "the transaction behind it confirmed", func() bool { return s.tx(t, behind).state == "CONFIRMED" })
			waitFor(t, 30*time.Second, "the unmineable transaction final", func() bool { return s.tx(t, tooBig).state == "FAILED_FINAL" })
			tx := s.do(t, http.MethodGet, "/api/v1/tx/"+tooBig, nil).body
			if tx["subState"] != "CANCELLED" {
				t.Fatalf("the unmineable transaction ended %v / %v, want FAILED_FINAL / CANCELLED", tx["state"], tx["subState"])
			}
			// The resolution's audit record carries the node's answer.
			var reason string
			if err := s.pool.QueryRow(context.Background(), "SELECT reason FROM stuck_resolution_audit WHERE tx_id = $1 AND action = 'CANCEL'", tooBig).Scan(&reason); err != nil {
				t.Fatalf("no cancellation on record: %v", err)
			}
			if !strings.Contains(reason, "no node takes the transaction as signed") || !strings.Contains(reason, "not mineable") {
				t.Fatalf("the cancellation's reason %q does not name the node's answer", reason)
			}
			t.Logf("%s: gas limit %d over the block's %d refused before a nonce; %d: %s / %s, cancelled because %q; the next nonce confirmed behind it",
				client, blockGas+1, blockGas, asked, tx["state"], tx["subState"], reason)
		})
	}
}

// go-ethereum refuses a transaction whose fee (gas limit x fee cap) is above its
// --rpc.txfeecap (1 ether by default). With the service told of that limit
// (fees.nodeTxFeeCap), an intent naming more is refused before a nonce with a reason
// naming the setting. Told of no limit, the node's refusal is recorded as
// ABOVE_NODE_FEE_CAP with the node's words, and the transaction is rebroadcast unchanged,
// never re-priced higher.
func TestFeeAboveTheNodesCap(t *testing.T) {
	t.Parallel()
	// 10M gas at 200 gwei: a 2 ether fee.
	intent := func(signer string) map[string]any {
		return map[string]any{"signer": signer, "to": devAddress(t, 5), "value": "1", "gasLimit": 10_000_000,
			"maxFeePerGas": "200000000000", "maxPriorityFeePerGas": "1000000000"}
	}
	t.Run("the service knows the node's cap", func(t *testing.T) {
		t.Parallel()
		sim := newTestChain(t, 250*time.Millisecond)
		s := startService(t, serviceOptions{chain: sim, signers: 1, fastPipeline: true})
		a := s.create(t, intent(devAddress(t, 0)))
		msg, _ := a.body["message"].(string)
		if a.status != http.StatusBadRequest || a.reason() != "INVALID_ARGUMENT" || !strings.Contains(msg, "fees.nodeTxFeeCap") {
			t.Fatalf("an intent above the node's fee cap: %d %s, want 400 INVALID_ARGUMENT naming fees.nodeTxFeeCap", a.status, a.raw)
		}
		if n := s.count(t, "SELECT count(*) FROM managed_tx"); n != 0 {
			t.Fatalf("the refused intent left %d rows", n)
		}
		t.Logf("refused before a nonce: %s", msg)
	})
	t.Run("the service does not know it", func(t *testing.T) {
		t.Parallel()
		sim := newTestChain(t, 250*time.Millisecond)
		s := startService(t, serviceOptions{chain: sim, signers: 1, fastPipeline: true, configure: func(bc *conf.Bootstrap) {
			bc.Fees.NodeTxFeeCap = ""
			bc.Stuck.MinAge = conf.Duration(time.Hour)
		}})
		id := s.createOK(t, intent(devAddress(t, 0)))
		waitFor(t, 30*time.Second, "three broadcasts refused for the node's cap", func() bool {
			return s.count(t, "SELECT count(*) FROM managed_tx WHERE sub_state = 'ABOVE_NODE_FEE_CAP' AND submit_attempts >= 3") == 1
		})
		if n := s.count(t, "SELECT count(*) FROM tx_attempt"); n != 1 {
			t.Fatalf("%d attempts signed: a refusal for the node's cap was re-priced", n)
		}
		lastError := fmt.Sprint(s.do(t, http.MethodGet, "/api/v1/tx/"+id, nil).body["lastError"])
		if !strings.Contains(lastError, "exceeds the configured cap") || !strings.Contains(lastError, "fees.nodeTxFeeCap") {
			t.Fatalf("last error %q does not carry the node's words and the setting", lastError)
		}
		t.Logf("recorded ABOVE_NODE_FEE_CAP, rebroadcast unchanged: %s", lastError)
	})
}

// A node that serves batches of at most 4 calls (go-ethereum's --rpc.batch-request-limit):
// the service's batches (broadcasts, receipts, headers, fees) are cut to what it takes, and
// 60 transactions from 3 signers confirm as they would anywhere.
func TestNodeBatchLimitIsLearned(t *testing.T) {
	t.Parallel()
	sim, err := chain.NewSimulated(chain.SimulatedConfig{BlockInterval: 250 * time.Millisecond, DevAccounts: 8, HTTPAddr: "127.0.0.1:0", BatchRequestLimit: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	s := startService(t, serviceOptions{chain: sim, signers: 3, fastPipeline: true})
	ids := make([]string, 0, 60)
	for i := range 60 {
		ids = append(ids, s.createOK(t, map[string]any{"signer": devAddress(t, i%3), "to": devAddress(t, 5), "value": fmt.Sprint(i + 1), "gasLimit": 21000}))
	}
	for _, id := range ids {
		waitFor(t, 60*time.Second, "transaction "+id+" confirmed", func() bool { return s.tx(t, id).state == "CONFIRMED" })
	}
	if n := s.count(t, "SELECT count(*) FROM managed_tx WHERE state <> 'CONFIRMED'"); n != 0 {
		t.Fatalf("%d transactions not confirmed", n)
	}
	t.Logf("60 transactions confirmed through a node serving batches of at most 4 calls")
}
