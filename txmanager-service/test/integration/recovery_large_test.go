package integration

import (
	"context"
	"fmt"
	"math/big"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"github.com/ethereum/go-ethereum/core/types"
	"github.com/ethereum/go-ethereum/rpc"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// A database loss of thousands of nonces per signer, older than any window of recent
// blocks, is recovered without a person (adopt-by-intent) and after an operator's release
// (hold): every retried lost request is answered with its transaction on chain, nothing is
// executed twice, and each signer serves again. The lost transactions are in blocks far
// below the head (the recovery's scan of the last recoveryScanBlocks blocks could not see
// them) and more than one recovery step's worth of nonces each.
func TestLargeLossesAreRecoveredForEverySigner(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode string
		// lost per signer; the first signer loses the most.
		lost []int
	}{
		{mode: conf.RecoveryAdoptByIntent, lost: []int{5000, 1000, 1000, 1000}},
		{mode: conf.RecoveryHold, lost: []int{5000, 1000, 1000, 1000}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			t.Parallel()
			recoverLargeLoss(t, tc.mode, tc.lost)
		})
	}
}

// lostRequest is an acknowledged create whose row the database lost, and the transaction
// the chain holds for it.
type lostRequest struct {
	signer    string
	requestID string
	value     int64
	hash      common.Hash
}

func recoverLargeLoss(t *testing.T, mode string, lost []int) {
	ctx := context.Background()
	sim := newTestChain(t, 0) // blocks only when the test commits them
	dsn := testsupport.MigratedDSN(t)
	opts := serviceOptions{chain: sim, signers: len(lost), fastPipeline: true, dsn: dsn, chainQuery: true, configure: func(bc *conf.Bootstrap) {
		bc.Nonce.NonceStateTimeout = 0 // every batch asks the chain
		bc.Nonce.RecoveryScanBlocks = 64
		bc.Recovery.Mode = mode
	}}
	recipient := devAddress(t, 7)
	const kept = 3 // per signer, created and confirmed through the service before the loss

	first := startService(t, opts)
	stopMining := mineEvery(sim, 100*time.Millisecond)
	var keptIDs []string
	for s := range lost {
		for i := range kept {
			keptIDs = append(keptIDs, first.createOK(t, map[string]any{"signer": devAddress(t, s), "to": recipient, "value": fmt.Sprint(1_000_000 + i), "gasLimit": 21000}))
		}
	}
	for _, id := range keptIDs {
		waitFor(t, 60*time.Second, "transaction "+id+" confirmed", func() bool { return first.tx(t, id).state == "CONFIRMED" })
	}
	first.stop(t)
	stopMining()

	// What the database then lost: acknowledged creates whose transactions the chain holds,
	// sent at the nonces after the kept ones. They are buried under many blocks.
	requests := sendLostTransactions(t, sim, lost, kept, recipient)
	for range 600 {
		sim.Commit()
	}

	started := time.Now()
	second := startService(t, opts)
	defer mineEvery(sim, 100*time.Millisecond)()
	if mode == conf.RecoveryHold {
		releaseEverySigner(t, second, len(lost), kept, lost)
	}

	// Every lost request is retried with its requestId, as its client would, by 16 clients.
	var adopted, twice atomic.Int64
	var mu sync.Mutex
	var wrong []string
	work := make(chan lostRequest)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for r := range work {
				got := retryUntilServed(t, second, map[string]any{"signer": r.signer, "to": recipient, "value": fmt.Sprint(r.value), "gasLimit": 21000, "requestId": r.requestID})
				switch {
				case got.status == http.StatusOK && got.tx()["txHash"] == r.hash.Hex() && got.tx()["recovered"] == true:
					adopted.Add(1)
				case got.status == http.StatusAccepted:
					twice.Add(1)
				default:
					mu.Lock()
					wrong = append(wrong, fmt.Sprintf("%s: %d %s", r.requestID, got.status, got.raw))
					mu.Unlock()
				}
			}
		})
	}
	retrying := time.Now()
	// Clients retry in no particular order: every signer's lost requests interleaved.
	rand.Shuffle(len(requests), func(i, j int) { requests[i], requests[j] = requests[j], requests[i] })
	for _, r := range requests {
		work <- r
	}
	close(work)
	wg.Wait()
	t.Logf("%s: %d lost requests retried by 16 clients in %.1f s", mode, len(requests), time.Since(retrying).Seconds())
	if len(wrong) > 0 || twice.Load() > 0 || adopted.Load() != int64(len(requests)) {
		t.Fatalf("%d lost requests: %d answered with their transaction, %d executed twice; others (first 5 of %d): %v",
			len(requests), adopted.Load(), twice.Load(), len(wrong), wrong[:min(5, len(wrong))])
	}

	// Each signer serves again, with how long its quarantine lasted, and its chain nonce is
	// exactly what was ever sent: nothing ran twice.
	client := ethClient(t, sim)
	for s, n := range lost {
		signer := devAddress(t, s)
		var held float64
		if err := second.pool.QueryRow(ctx, `SELECT EXTRACT(EPOCH FROM released_at - detected_at)::float8 FROM signer_quarantine
			WHERE signer = $1 AND released_at IS NOT NULL`, signer).Scan(&held); err != nil {
			t.Fatalf("signer %s: no released quarantine: %v", signer, err)
		}
		t.Logf("%s: signer %d lost %d nonces; serving again %.1f s after its quarantine (%.1f s after the service started)", mode, s, n, held, time.Since(started).Seconds())
		next := second.createOK(t, map[string]any{"signer": signer, "to": recipient, "value": "1", "gasLimit": 21000, "requestId": fmt.Sprintf("after-%d", s)})
		if nonce := second.count(t, "SELECT nonce FROM managed_tx WHERE tx_id = $1", next); nonce != int64(kept+n) {
			t.Fatalf("signer %s: a new create got nonce %d, want %d (right above the lost ones)", signer, nonce, kept+n)
		}
		waitFor(t, 60*time.Second, "the new create mined", func() bool {
			nonce, err := client.NonceAt(ctx, common.HexToAddress(signer), nil)
			return err == nil && nonce == uint64(kept+n+1)
		})
	}
	if n := second.count(t, "SELECT count(*) FROM managed_tx WHERE recovered_at IS NOT NULL AND request_id IS NOT NULL"); n != int64(len(requests)) {
		t.Fatalf("%d adopted rows, want %d", n, len(requests))
	}
}

// sendLostTransactions signs and sends, for each signer s, lost[s] transfers at the nonces
// from kept on, committing blocks as it goes, and returns them as the requests they were.
func sendLostTransactions(t *testing.T, sim *chain.SimulatedChain, lost []int, kept int, recipient string) []lostRequest {
	t.Helper()
	to := common.HexToAddress(recipient)
	chainID := big.NewInt(chain.SimulatedChainID)
	signer := types.LatestSignerForChainID(chainID)
	head, err := sim.Backend().Client().HeaderByNumber(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	feeCap := new(big.Int).Add(new(big.Int).Mul(head.BaseFee, big.NewInt(4)), big.NewInt(2_000_000_000))
	var requests []lostRequest
	var batch []rpc.BatchElem
	flush := func() {
		if err := sim.RPCClient().BatchCallContext(context.Background(), batch); err != nil {
			t.Fatal(err)
		}
		for _, e := range batch {
			if e.Error != nil {
				t.Fatalf("send: %v", e.Error)
			}
		}
		batch = batch[:0]
		sim.Commit()
	}
	for s, n := range lost {
		key := sim.DevKeys()[s]
		for i := range n {
			value := int64(s*100_000 + i + 1)
			tx, err := types.SignTx(types.NewTx(&types.DynamicFeeTx{ChainID: chainID, Nonce: uint64(kept + i), GasTipCap: big.NewInt(2_000_000_000),
				GasFeeCap: feeCap, Gas: 21000, To: &to, Value: big.NewInt(value)}), signer, key)
			if err != nil {
				t.Fatal(err)
			}
			raw, err := tx.MarshalBinary()
			if err != nil {
				t.Fatal(err)
			}
			batch = append(batch, rpc.BatchElem{Method: "eth_sendRawTransaction", Args: []any{fmt.Sprintf("0x%x", raw)}, Result: new(common.Hash)})
			requests = append(requests, lostRequest{signer: devAddress(t, s), requestID: fmt.Sprintf("lost-%d-%d", s, i), value: value, hash: tx.Hash()})
			if len(batch) == 500 { // an account's pool slots and a block's gas both have room
				flush()
			}
		}
		if len(batch) > 0 {
			flush()
		}
	}
	return requests
}

// releaseEverySigner is an operator's release of each quarantined signer (recovery.mode
// hold): creates are refused until then, and each release answers with the transactions
// its recovery recorded.
func releaseEverySigner(t *testing.T, s *testService, signers, kept int, lost []int) {
	t.Helper()
	for i := range signers {
		signer := devAddress(t, i)
		// A create finds the chain ahead and quarantines the signer (or finds it so).
		refused := s.create(t, map[string]any{"signer": signer, "to": devAddress(t, 7), "value": "5", "gasLimit": 21000})
		if refused.status != http.StatusConflict || refused.reason() != "SIGNER_QUARANTINED" {
			t.Fatalf("create before the release: %d %s, want 409 SIGNER_QUARANTINED", refused.status, refused.raw)
		}
		var released apiResponse
		waitFor(t, 120*time.Second, "signer "+signer+" released with every lost transaction recorded", func() bool {
			released = s.do(t, http.MethodPost, "/api/v1/admin/signers/"+signer+"/release", []byte(`{"note":"the lost nonces are ours"}`))
			if released.status == http.StatusNotFound { // released by an earlier call whose answer said still recording
				released = s.do(t, http.MethodGet, "/api/v1/admin/signers/"+signer+"/quarantine", nil)
			}
			return released.status == http.StatusOK && released.body["quarantined"] != true
		})
		if got := fmt.Sprint(released.body["recorded"]); got != fmt.Sprint(lost[i]) {
			t.Fatalf("release of %s: %s, want %d transactions recorded", signer, released.raw, lost[i])
		}
		ranges, _ := released.body["ranges"].([]any)
		if len(ranges) != 1 || fmt.Sprint(ranges[0].(map[string]any)["class"]) != "UNCLAIMED" || fmt.Sprint(ranges[0].(map[string]any)["count"]) != fmt.Sprint(lost[i]) {
			t.Fatalf("release of %s: ranges %v, want one UNCLAIMED range of %d", signer, ranges, lost[i])
		}
		_ = kept
	}
}

// retryUntilServed sends a create until it is not refused with 503 (a signer recovering),
// as a client retries.
func retryUntilServed(t *testing.T, s *testService, payload map[string]any) apiResponse {
	deadline := time.Now().Add(180 * time.Second)
	for {
		got := s.create(t, payload)
		if got.status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			return got
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// mineEvery commits a block every interval until the returned stop is called.
func mineEvery(sim devChain, interval time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(interval):
				sim.Commit()
			}
		}
	})
	return func() { close(done); wg.Wait() }
}
