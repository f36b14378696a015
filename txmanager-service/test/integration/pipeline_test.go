package integration

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/conf"
)

// newTestChain is a simulated chain the test mines by hand (blockInterval 0) or on a timer,
// reachable over loopback JSON-RPC like any node.
func newTestChain(t testing.TB, blockInterval time.Duration) *chain.SimulatedChain {
	t.Helper()
	sim, err := chain.NewSimulated(chain.SimulatedConfig{BlockInterval: blockInterval, DevAccounts: 8, HTTPAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sim.Close() })
	if blockInterval == 0 {
		sim.Commit() // a head with a current timestamp, so the service's readiness sees a live chain
	}
	return sim
}

type txRow struct {
	state, subState, txHash, blockHash string
	attempts                           int
}

func (s *testService) tx(t *testing.T, id string) txRow {
	t.Helper()
	var r txRow
	err := s.pool.QueryRow(context.Background(), `SELECT state, coalesce(sub_state, ''), coalesce(tx_hash, ''), coalesce(block_hash, ''), submit_attempts
		FROM managed_tx WHERE tx_id = $1`, id).Scan(&r.state, &r.subState, &r.txHash, &r.blockHash, &r.attempts)
	if err != nil {
		t.Fatalf("tx %s: %v", id, err)
	}
	return r
}

func (s *testService) createOK(t *testing.T, payload map[string]any) string {
	t.Helper()
	a := s.create(t, payload)
	if a.status != http.StatusAccepted {
		t.Fatalf("create: %d %s", a.status, a.raw)
	}
	return a.tx()["txId"].(string)
}

// Issue 4: 200 transactions from 4 signers reach CONFIRMED on the embedded chain, a
// reverting call reaches FAILED_FINAL, and the completions feed lists each exactly once.
func TestTransactionsReachFinalStates(t *testing.T) {
	t.Parallel()
	s := startService(t, serviceOptions{chainQuery: true, fastPipeline: true, configure: func(bc *conf.Bootstrap) {
		bc.Chain.Embedded.BlockInterval = conf.Duration(250 * time.Millisecond)
		// Without simulation the reverting intent below is admitted and mined, as it would
		// be if the chain's state changed between admission and mining.
		bc.Create.SimulateCalls = false
	}})
	recipient := devAddress(t, 9)
	ids := make(chan string, 201)
	var wg sync.WaitGroup
	for signer := range 4 {
		from := devAddress(t, signer)
		for i := range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ids <- s.createOK(t, map[string]any{"signer": from, "to": recipient, "value": fmt.Sprint(1000 + i), "gasLimit": 21000})
			}()
		}
	}
	wg.Wait()
	// Contract creation whose init code reverts, with an explicit gas limit (and simulation
	// off) so it is mined.
	reverting := s.createOK(t, map[string]any{"signer": devAddress(t, 4), "data": "0x60006000fd", "gasLimit": 100000})
	close(ids)
	var confirmedIDs []string
	for id := range ids {
		confirmedIDs = append(confirmedIDs, id)
	}

	waitFor(t, 90*time.Second, "every transaction final", func() bool {
		return s.count(t, "SELECT count(*) FROM managed_tx WHERE state IN ('CONFIRMED', 'FAILED_FINAL')") == 201
	})
	for _, id := range confirmedIDs {
		if r := s.tx(t, id); r.state != "CONFIRMED" {
			t.Fatalf("tx %s ended %s/%s, want CONFIRMED", id, r.state, r.subState)
		}
	}
	if r := s.tx(t, reverting); r.state != "FAILED_FINAL" || r.subState != "REVERTED" {
		t.Fatalf("reverting tx ended %s/%s, want FAILED_FINAL/REVERTED", r.state, r.subState)
	}
	got := s.do(t, http.MethodGet, "/api/v1/tx/"+reverting, nil)
	if receipt, _ := got.body["receipt"].(map[string]any); receipt == nil || receipt["status"] != "0" || got.body["state"] != "FAILED_FINAL" {
		t.Fatalf("query of the reverted tx: %s", got.raw)
	}

	// Page through the feed with a small page size: every final tx exactly once.
	seen := s.pageCompletions(t, 201)
	if len(seen) != 201 || seen[reverting] != "FAILED_FINAL" {
		t.Fatalf("feed served %d completions (reverting: %q), want 201", len(seen), seen[reverting])
	}
}

// Check 4 (docs/design.md#how-the-promises-are-checked): a mined transaction whose block is replaced goes back to TRACKING and
// ends CONFIRMED in its new block; one dropped by the reorg is rebroadcast and confirmed.
// Both ways a receipt is kept before finality are covered: written as MINED (many
// confirmations to go) and held in memory to be written with the final state (few).
func TestReorgRevertsThenConfirmsInTheNewBlock(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		confirmations uint64
		held          bool
	}{
		{"receipt on record", 12, false},
		{"receipt held until final", 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testReorg(t, tc.confirmations, tc.held)
		})
	}
}

// inPool says whether the row is broadcast (TRACKING with a hash) and its transaction waits
// in the simulated node's pool.
func inPool(sim *chain.SimulatedChain, r txRow) bool {
	if r.state != "TRACKING" || r.txHash == "" {
		return false
	}
	_, pending, err := sim.Backend().Client().TransactionByHash(context.Background(), common.HexToHash(r.txHash))
	return err == nil && pending
}

// receiptsFound is how many receipt look-ups found a receipt (by hash or by reading a block).
func (s *testService) receiptsFound(t *testing.T) float64 {
	t.Helper()
	return s.metricSumsWhere(t, `result="found"`)["receipt_check_total"]
}

// The block that makes a held receipt final wakes finality at once. Finality's own interval
// is an hour here, so only the receipt checker, following the head while it holds a
// receipt, can confirm the transfer within the wait.
func TestFinalityFollowsTheHead(t *testing.T) {
	t.Parallel()
	sim := newTestChain(t, 0)
	s := startService(t, serviceOptions{chain: sim, signers: 1, fastPipeline: true, configure: func(bc *conf.Bootstrap) {
		bc.Pipeline.FinalityInterval = conf.Duration(time.Hour)
		bc.Confirmations.Required = 2
	}})
	id := s.createOK(t, map[string]any{"signer": sim.DevAddresses()[0].Hex(), "to": sim.DevAddresses()[7].Hex(), "value": "1", "gasLimit": 21000})
	waitFor(t, 20*time.Second, "broadcast", func() bool { return inPool(sim, s.tx(t, id)) })
	foundBefore := s.receiptsFound(t)
	sim.Commit() // one confirmation of two: the receipt is found and held
	waitFor(t, 20*time.Second, "receipt found", func() bool { return s.receiptsFound(t) > foundBefore })
	// The finality pass the found receipt woke runs meanwhile and leaves it unconfirmed; the
	// next block must wake finality by itself.
	time.Sleep(300 * time.Millisecond)
	if r := s.tx(t, id); r.state != "TRACKING" {
		t.Fatalf("row %+v after one confirmation of two, want TRACKING", r)
	}
	sim.Commit()
	waitFor(t, 20*time.Second, "confirmed on the second block, without finality's interval", func() bool { return s.tx(t, id).state == "CONFIRMED" })
}

func testReorg(t *testing.T, confirmations uint64, held bool) {
	sim := newTestChain(t, 0)
	s := startService(t, serviceOptions{chain: sim, signers: 2, fastPipeline: true, configure: func(bc *conf.Bootstrap) {
		bc.Confirmations.Required = confirmations
	}})
	recipient := sim.DevAddresses()[7].Hex()

	// mineAndFind mines the tx and waits until the service has its receipt: on record
	// (MINED), or held (the look-up counted as found while the row shows no block). It
	// returns the parent of the tx's block and that block's hash.
	mineAndFind := func(t *testing.T, id string) (common.Hash, string) {
		t.Helper()
		waitFor(t, 20*time.Second, "broadcast", func() bool {
			// An accepted first send leaves the row SIGNED: the node's pool is the witness.
			r := s.tx(t, id)
			return inPool(sim, r) && r.subState == "SIGNED"
		})
		parent, err := sim.LatestHeader(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		foundBefore := s.receiptsFound(t)
		block := sim.Commit()
		if held {
			waitFor(t, 20*time.Second, "receipt found and held", func() bool {
				// Found by hash or by reading the block: either counts one look-up found.
				return s.receiptsFound(t) > foundBefore && s.tx(t, id).blockHash == ""
			})
			time.Sleep(300 * time.Millisecond) // finality passes run on the held receipt meanwhile
			if r := s.tx(t, id); r.state != "TRACKING" || r.subState == "MINED" || r.blockHash != "" {
				t.Fatalf("held receipt: row %+v, want TRACKING with no receipt on record before finality", r)
			}
		} else {
			waitFor(t, 20*time.Second, "receipt recorded", func() bool { return s.tx(t, id).subState == "MINED" })
			if got := s.tx(t, id).blockHash; got != block.Hex() {
				t.Fatalf("receipt in block %s, want %s", got, block.Hex())
			}
		}
		return parent.Hash, block.Hex()
	}
	commitUntilFinal := func(t *testing.T, id string) {
		t.Helper()
		for range confirmations + 2 {
			sim.Commit()
		}
		waitFor(t, 20*time.Second, "confirmed", func() bool { return s.tx(t, id).state == "CONFIRMED" })
	}

	t.Run("block replaced, tx re-mined", func(t *testing.T) {
		id := s.createOK(t, map[string]any{"signer": sim.DevAddresses()[0].Hex(), "to": recipient, "value": "1", "gasLimit": 21000})
		parent, firstBlock := mineAndFind(t, id)
		if err := sim.Backend().Fork(parent); err != nil {
			t.Fatalf("fork: %v", err)
		}
		// The replaced block's tx returns to the pool and lands in the new branch's block.
		sim.Commit()
		sim.Commit()
		if !held {
			waitFor(t, 20*time.Second, "reorg noticed", func() bool {
				r := s.tx(t, id)
				return r.blockHash != firstBlock
			})
		}
		commitUntilFinal(t, id)
		if r := s.tx(t, id); r.blockHash == firstBlock || r.blockHash == "" {
			t.Fatalf("confirmed in block %s, want a block other than the replaced %s", r.blockHash, firstBlock)
		}
		if n := s.count(t, "SELECT count(*) FROM tx_completions WHERE tx_id = $1", id); n != 1 {
			t.Fatalf("completions for the reorged tx = %d, want 1", n)
		}
	})

	t.Run("tx dropped by the reorg is rebroadcast", func(t *testing.T) {
		id := s.createOK(t, map[string]any{"signer": sim.DevAddresses()[1].Hex(), "to": recipient, "value": "2", "gasLimit": 21000})
		parent, firstBlock := mineAndFind(t, id)
		if err := sim.Backend().Fork(parent); err != nil {
			t.Fatalf("fork: %v", err)
		}
		sim.Backend().Rollback() // the reorg drops the tx: it is in no pool and no block
		sim.Commit()
		sim.Commit()
		waitFor(t, 20*time.Second, "reorg noticed and the tx rebroadcast", func() bool {
			r := s.tx(t, id)
			return r.blockHash == "" && r.attempts >= 2 && r.subState == "SUBMITTED"
		})
		commitUntilFinal(t, id)
		if r := s.tx(t, id); r.blockHash == firstBlock {
			t.Fatalf("confirmed in the dropped block %s", firstBlock)
		}
		if n := s.count(t, "SELECT count(*) FROM tx_attempt WHERE tx_id = $1", id); n != 1 {
			t.Fatalf("attempts = %d: a rebroadcast must reuse the same signed bytes", n)
		}
	})
}
