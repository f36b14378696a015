package integration

import (
	"context"
	"crypto/ecdsa"
	"fmt"
	"math/big"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/params"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/conf"
)

// A chain whose blocks carry no base fee (a chain without EIP-1559, shown by a proxy that
// hides it from a real node, which still mines legacy transactions): the service signs
// legacy transactions at the node's gas price and they confirm.
func TestLegacyFeeChain(t *testing.T) {
	t.Parallel()
	sim, proxies := proxiedChain(t, 1)
	proxies[0].SetLegacy(true)
	s := startService(t, serviceOptions{chain: sim, signers: 1, fastPipeline: true, configure: throughProxies(proxies, 5*time.Second)})
	var ids []string
	for i := range 5 {
		ids = append(ids, s.createOK(t, map[string]any{"signer": devAddress(t, 0), "to": devAddress(t, 6), "value": fmt.Sprint(i + 1), "gasLimit": 21000}))
	}
	for _, id := range ids {
		waitFor(t, 60*time.Second, "legacy transaction "+id+" confirmed", func() bool { return s.tx(t, id).state == "CONFIRMED" })
	}
	rows, err := s.pool.Query(context.Background(), "SELECT raw_tx FROM tx_attempt")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var raw []byte
		if err := rows.Scan(&raw); err != nil {
			t.Fatal(err)
		}
		var tx types.Transaction
		if err := tx.UnmarshalBinary(raw); err != nil {
			t.Fatal(err)
		}
		if tx.Type() != types.LegacyTxType || tx.ChainId().Int64() != chain.SimulatedChainID {
			t.Fatalf("attempt of type %d for chain %v, want a legacy EIP-155 transaction", tx.Type(), tx.ChainId())
		}
		n++
	}
	if n < len(ids) {
		t.Fatalf("%d attempts stored for %d transactions", n, len(ids))
	}
}

// burnerCode loops until its gas runs out: a spammer's transaction that fills a block.
var burnerCode = []byte{0x5b, 0x60, 0x00, 0x56} // JUMPDEST PUSH1 0 JUMP

// spammer fills blocks with high-tip burner transactions from one key.
type spammer struct {
	sim   devChain
	key   *ecdsa.PrivateKey
	nonce uint64
}

// block sends one burner transaction of gas gas, then seals a block: with its 50 gwei tip
// it goes first, and the rest of the block is left to others.
func (sp *spammer) block(ctx context.Context, gas uint64) error {
	tx, err := types.SignNewTx(sp.key, types.LatestSignerForChainID(big.NewInt(chain.SimulatedChainID)), &types.DynamicFeeTx{
		ChainID: big.NewInt(chain.SimulatedChainID), Nonce: sp.nonce, Gas: gas,
		GasTipCap: big.NewInt(50 * params.GWei), GasFeeCap: big.NewInt(500 * params.GWei), Data: burnerCode,
	})
	if err != nil {
		return err
	}
	raw, _ := tx.MarshalBinary()
	if err := sp.sim.SendRawTransaction(ctx, raw); err != nil {
		return fmt.Errorf("spam at nonce %d: %w", sp.nonce, err)
	}
	sp.nonce++
	// The pool promotes a new transaction to the miner's list on a goroutine of its own;
	// give it time, or the block is built without the spam.
	time.Sleep(100 * time.Millisecond)
	sp.sim.Commit()
	return nil
}

// The base fee driven up at least 8x (a spammer filling every block with high tips) while
// 200 transactions are pending, then held there: the 200 are re-priced automatically,
// never above the caps, and all confirm with no admin action. Their first fees no longer
// clear the base fee, so only re-priced attempts can be mined. On go-ethereum and on anvil.
func TestBaseFeeSpikeIsRidenOut(t *testing.T) {
	t.Parallel()
	const blockGas = 1_000_000
	for _, client := range chainClients() {
		t.Run(client, func(t *testing.T) {
			t.Parallel()
			// Blocks are sealed by the test, so the spam always reaches a block before it is sealed.
			var sim devChain
			if client == "anvil" {
				sim = startAnvilChain(t, 0, "--gas-limit", fmt.Sprint(blockGas))
			} else {
				simulated, err := chain.NewSimulated(chain.SimulatedConfig{DevAccounts: 8, HTTPAddr: "127.0.0.1:0", GasLimit: blockGas, TxPoolSlots: 4096})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = simulated.Close() })
				simulated.Commit()
				sim = simulated
			}
			baseFeeSpikeIsRidenOut(t, sim, blockGas)
		})
	}
}

func baseFeeSpikeIsRidenOut(t *testing.T, sim devChain, blockGas uint64) {
	maxFeeCap, maxTipCap := big.NewInt(2_000*params.GWei), big.NewInt(200*params.GWei)
	s := startService(t, serviceOptions{chain: sim, signers: 4, fastPipeline: true, configure: func(bc *conf.Bootstrap) {
		bc.Fees.MaxFeePerGas, bc.Fees.MaxPriorityFeePerGas = maxFeeCap.String(), maxTipCap.String()
		// Longer than the creates and the climb to 8x, even on a loaded machine: the first
		// re-pricing would match the spammer's tip and let the 200 in before the peak.
		bc.Resubmit.Interval = conf.Duration(30 * time.Second)
		bc.Confirmations.Required = 2
	}})
	ctx := context.Background()
	start, err := sim.SuggestFees(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sp := &spammer{sim: sim, key: sim.DevKeys()[7]}

	var ids []string
	for i := range 200 {
		ids = append(ids, s.createOK(t, map[string]any{"signer": devAddress(t, i%4), "to": devAddress(t, 6), "value": fmt.Sprint(i + 1), "gasLimit": 21000}))
	}
	for _, id := range ids {
		waitFor(t, 30*time.Second, "transaction "+id+" broadcast", func() bool { return s.tx(t, id).state == "TRACKING" })
	}
	// Full blocks of spam until the base fee is 8x.
	target := new(big.Int).Mul(start.BaseFee, big.NewInt(8))
	peak := start.BaseFee
	for peak.Cmp(target) < 0 {
		if err := sp.block(ctx, blockGas-10_000); err != nil {
			t.Fatal(err)
		}
		fees, err := sim.SuggestFees(ctx)
		if err != nil {
			t.Fatal(err)
		}
		peak = fees.BaseFee
	}
	pending := s.count(t, "SELECT count(*) FROM managed_tx WHERE receipt IS NULL")
	t.Logf("base fee %s -> %s wei (%.1fx) with %d of 200 pending", start.BaseFee, peak,
		new(big.Float).Quo(new(big.Float).SetInt(peak), new(big.Float).SetInt(start.BaseFee)), pending)
	if pending != 200 {
		t.Fatalf("%d of 200 pending at the peak, want all", pending)
	}
	// Then half of every block is spam, a block every 250ms, until all 200 are final: the
	// base fee stays up, and only re-priced transactions clear it.
	stop, done := make(chan struct{}), make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				done <- nil
				return
			case <-time.After(250 * time.Millisecond):
				if err := sp.block(ctx, blockGas/2); err != nil {
					done <- err
					return
				}
			}
		}
	}()
	for _, id := range ids {
		waitFor(t, 2*time.Minute, "transaction "+id+" confirmed while the base fee stays high", func() bool { return s.tx(t, id).state == "CONFIRMED" })
	}
	close(stop)
	if err := <-done; err != nil {
		t.Fatalf("spammer: %v", err)
	}
	var attempts int64
	var overCap int64
	if err := s.pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE max_fee_per_gas > $1::numeric OR max_priority_fee_per_gas > $2::numeric) FROM tx_attempt`,
		maxFeeCap.String(), maxTipCap.String()).Scan(&attempts, &overCap); err != nil {
		t.Fatal(err)
	}
	if overCap != 0 {
		t.Fatalf("%d attempts were signed above the caps", overCap)
	}
	if attempts <= int64(len(ids)) {
		t.Fatalf("%d attempts for %d transactions: nothing was re-priced through an 8x spike", attempts, len(ids))
	}
	if metric := s.metricSums(t)["stuck_total"]; metric != 0 {
		t.Logf("stuck_total %v (the stuck policy saw head-of-line waits)", metric)
	}
	t.Logf("replacements per transaction: %.2f (%d attempts for %d transactions)", float64(attempts-int64(len(ids)))/float64(len(ids)), attempts, len(ids))
}

// A node whose pool floor is above the tip it suggests (a private or L2 node may run so)
// refuses the service's attempt as underpriced while the market it reports never moves. The
// outcome table puts the transaction on "outbid": each resubmission replaces it at least
// the bump above its last attempt, until the node takes it and it confirms. Re-pricing to
// the market alone would send the same refused bytes for ever.
func TestNodeFloorAboveItsSuggestionIsOutbid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sim := newTestChain(t, 0) // blocks only when the test commits them: the market stays put
	s := startService(t, serviceOptions{chain: sim, signers: 1, fastPipeline: true})
	market, err := sim.SuggestFees(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Half again the suggested tip: four bumps of 12% clear it.
	floor := new(big.Int).Div(new(big.Int).Mul(market.TipCap, big.NewInt(3)), big.NewInt(2))
	if err := sim.SetPoolMinimumTip(ctx, floor); err != nil {
		t.Fatal(err)
	}
	id := s.createOK(t, map[string]any{"signer": devAddress(t, 0), "to": devAddress(t, 4), "value": "1", "gasLimit": 21000})
	waitFor(t, 30*time.Second, "the node's refusal recorded", func() bool { return s.tx(t, id).subState == "UNDERPRICED" })
	waitFor(t, 60*time.Second, "a replacement the node takes", func() bool { return s.tx(t, id).subState == "SUBMITTED" })
	// Until a block includes it, the node's suggestion has nothing new to sample.
	if now, err := sim.SuggestFees(ctx); err != nil || now.TipCap.Cmp(market.TipCap) != 0 {
		t.Fatalf("the suggested tip moved (%v, %v): the case no longer shows a market that stood still", now, err)
	}
	for range 3 {
		sim.Commit()
	}
	waitFor(t, 30*time.Second, "transaction "+id+" confirmed", func() bool { return s.tx(t, id).state == "CONFIRMED" })

	rows, err := s.pool.Query(ctx, "SELECT max_priority_fee_per_gas::text FROM tx_attempt WHERE tx_id = $1 ORDER BY max_priority_fee_per_gas", id)
	if err != nil {
		t.Fatal(err)
	}
	var tips []*big.Int
	for rows.Next() {
		var v string
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		tip, _ := new(big.Int).SetString(v, 10)
		tips = append(tips, tip)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(tips) < 2 || tips[0].Cmp(market.TipCap) != 0 || tips[len(tips)-1].Cmp(floor) < 0 {
		t.Fatalf("attempt tips %v: want the first at the suggested %v and the last at or above the floor %v", tips, market.TipCap, floor)
	}
	for i := 1; i < len(tips); i++ {
		// Each replacement clears the node's replacement rule (10%) over the one before.
		if min := new(big.Int).Div(new(big.Int).Mul(tips[i-1], big.NewInt(110)), big.NewInt(100)); tips[i].Cmp(min) < 0 {
			t.Fatalf("attempt tips %v: %v is less than 10%% above %v", tips, tips[i], tips[i-1])
		}
	}
	t.Logf("suggested tip %v, pool floor %v: confirmed after %d attempts, tips %v", market.TipCap, floor, len(tips), tips)
}
