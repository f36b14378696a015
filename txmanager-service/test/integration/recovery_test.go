package integration

import (
	"context"
	"fmt"
	"maps"
	"math/big"
	"net/http"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/core/types"

	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/test/e2e"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// After a failover to a standby that missed the last commits, transactions the chain holds
// may have lost their attempt rows: the service re-signs them (with other fees, so another
// hash), the node answers "nonce too low", and none of the hashes on record is known.
// The transaction at that nonce carries the row's own intent: it is recognised, recorded as
// the row's attempt and followed to CONFIRMED, not left NONCE_TAKEN.
func TestLostAttemptsAreRecognisedOnChain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sim := newTestChain(t, 0) // blocks only when the test commits them
	dsn := testsupport.MigratedDSN(t)
	opts := serviceOptions{chain: sim, signers: 1, fastPipeline: true, dsn: dsn, chainQuery: true}
	first := startService(t, opts)
	signer := devAddress(t, 0)
	var ids []string
	for i := range 3 {
		ids = append(ids, first.createOK(t, map[string]any{"signer": signer, "to": devAddress(t, 4), "value": fmt.Sprint(i + 1), "gasLimit": 21000}))
	}
	for _, id := range ids {
		waitFor(t, 30*time.Second, "broadcast of "+id, func() bool { return first.tx(t, id).state == "TRACKING" })
	}
	first.stop(t)
	sim.Commit() // the three are mined

	// The database loses the signing: attempts gone, rows back to ALLOCATED.
	for _, stmt := range []string{
		"DELETE FROM tx_attempt",
		"UPDATE managed_tx SET state = 'ALLOCATED', sub_state = NULL, tx_hash = NULL, submit_attempts = 0, last_submit_at = NULL, next_resubmit_at = NULL",
	} {
		if _, err := first.pool.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	// Empty blocks move the base fee, so the service's new signatures get other hashes.
	for range 8 {
		sim.Commit()
	}
	stop := make(chan struct{})
	mined := make(chan struct{})
	go func() {
		defer close(mined)
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
				sim.Commit()
			}
		}
	}()
	defer func() { close(stop); <-mined }()

	second := startService(t, opts)
	for _, id := range ids {
		waitFor(t, 60*time.Second, "transaction "+id+" recognised and confirmed", func() bool { return second.tx(t, id).state == "CONFIRMED" })
	}
	if n := second.count(t, "SELECT count(*) FROM managed_tx WHERE sub_state = 'NONCE_TAKEN' OR state = 'FAILED_FINAL'"); n != 0 {
		t.Fatalf("%d transactions ended NONCE_TAKEN or FAILED_FINAL", n)
	}
	if recognised := second.metricSums(t)["nonce_taken_resolved_total"]; recognised < 1 {
		t.Fatalf("nonce_taken_resolved_total = %v: the confirmations did not come through recognition", recognised)
	}
}

// In recovery.mode hold, a chain ahead of the database (the last commits lost in a failover,
// while their transactions were mined): the signer is quarantined, creates are refused with a clear
// reason and consume no nonce, the admin API lists the unknown nonces with what the chain
// holds there, and after an operator's release allocation goes on above them.
func TestChainAheadOfTheDatabaseQuarantinesTheSigner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sim := newTestChain(t, 250*time.Millisecond)
	dsn := testsupport.MigratedDSN(t)
	opts := serviceOptions{chain: sim, signers: 1, fastPipeline: true, dsn: dsn, chainQuery: true, configure: func(bc *conf.Bootstrap) {
		bc.Nonce.NonceStateTimeout = 0 // every batch asks the chain
		bc.Recovery.Mode = conf.RecoveryHold
	}}
	first := startService(t, opts)
	signer := devAddress(t, 0)
	var ids []string
	for i := range 5 {
		ids = append(ids, first.createOK(t, map[string]any{"signer": signer, "to": devAddress(t, 4), "value": fmt.Sprint(i + 1), "gasLimit": 21000}))
	}
	for _, id := range ids {
		waitFor(t, 60*time.Second, "transaction "+id+" confirmed", func() bool { return first.tx(t, id).state == "CONFIRMED" })
	}
	first.stop(t)
	// The standby missed the last two allocations: their rows, attempts and completions are
	// gone and the cursor is two behind, while the chain has both transactions.
	for _, stmt := range []string{
		"DELETE FROM tx_completions WHERE tx_id IN (SELECT tx_id FROM managed_tx WHERE nonce >= 3)",
		"DELETE FROM tx_attempt WHERE nonce >= 3",
		"DELETE FROM managed_tx WHERE nonce >= 3",
		"UPDATE signer_nonce_cursor SET next_nonce = 3",
	} {
		if _, err := first.pool.Exec(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}

	second := startService(t, opts)
	refused := second.create(t, map[string]any{"signer": signer, "to": devAddress(t, 4), "value": "99", "gasLimit": 21000, "requestId": "after-failover"})
	requireAlertAnswer(t, "TxmSignerQuarantined", refused)
	if n := second.count(t, "SELECT next_nonce FROM signer_nonce_cursor"); n != 3 {
		t.Fatalf("cursor moved to %d while quarantined", n)
	}
	report := second.do(t, http.MethodGet, "/api/v1/admin/signers/"+signer+"/quarantine?nonces=true", nil)
	unknown, _ := report.body["unknownNonces"].([]any)
	if report.status != http.StatusOK || report.body["quarantined"] != true || len(unknown) != 2 {
		t.Fatalf("quarantine report: %d %s, want quarantined with 2 unknown nonces", report.status, report.raw)
	}
	for _, u := range unknown {
		if entry, _ := u.(map[string]any); entry["found"] != true || entry["txHash"] == "" || entry["blockNumber"] == "0" {
			t.Fatalf("unknown nonce without what the chain holds: %v", entry)
		}
	}
	// nextFromNonce "0" (or absent): no page follows.
	lastPage := func(body map[string]any) bool {
		next, ok := body["nextFromNonce"]
		return !ok || fmt.Sprint(next) == "0"
	}
	if !lastPage(report.body) {
		t.Fatalf("a complete listing names a next page: %v", report.body["nextFromNonce"])
	}
	// The listing pages: one nonce per page here, the second page where the first ends.
	pages := []struct {
		query    string
		want     string // the nonce listed
		wantNext any    // nextFromNonce (absent: the last page)
	}{
		{"?nonces=true&limit=1", fmt.Sprint(unknown[0].(map[string]any)["nonce"]), fmt.Sprint(unknown[1].(map[string]any)["nonce"])},
		{"?nonces=true&limit=1&from_nonce=" + fmt.Sprint(unknown[1].(map[string]any)["nonce"]), fmt.Sprint(unknown[1].(map[string]any)["nonce"]), nil},
	}
	for _, page := range pages {
		got := second.do(t, http.MethodGet, "/api/v1/admin/signers/"+signer+"/quarantine"+page.query, nil)
		listed, _ := got.body["unknownNonces"].([]any)
		if got.status != http.StatusOK || len(listed) != 1 || fmt.Sprint(listed[0].(map[string]any)["nonce"]) != page.want {
			t.Fatalf("page %s: %d %s, want nonce %s alone", page.query, got.status, got.raw, page.want)
		}
		if (page.wantNext == nil && !lastPage(got.body)) || (page.wantNext != nil && fmt.Sprint(got.body["nextFromNonce"]) != page.wantNext) {
			t.Fatalf("page %s: nextFromNonce %v, want %v", page.query, got.body["nextFromNonce"], page.wantNext)
		}
	}
	if bad := second.do(t, http.MethodGet, "/api/v1/admin/signers/"+signer+"/quarantine?from_nonce=-1", nil); bad.status != http.StatusBadRequest || bad.reason() != "INVALID_ARGUMENT" {
		t.Fatalf("negative from_nonce: %d %s, want 400 INVALID_ARGUMENT", bad.status, bad.raw)
	}
	released := second.do(t, http.MethodPost, "/api/v1/admin/signers/"+signer+"/release", []byte(`{"note":"both are ours, confirmed on chain"}`))
	if released.status != http.StatusOK || released.body["quarantined"] == true {
		t.Fatalf("release: %d %s", released.status, released.raw)
	}
	again := second.create(t, map[string]any{"signer": signer, "to": devAddress(t, 4), "value": "99", "gasLimit": 21000, "requestId": "after-failover"})
	if again.status != http.StatusAccepted || again.tx()["nonce"] != "5" {
		t.Fatalf("create after release: %d %s, want 202 at nonce 5 (above the unknown ones)", again.status, again.raw)
	}
}

// After a database loss (the rows of a signer's last transactions gone while the chain has
// them), the service settles by itself (recovery.mode adopt-by-intent): each lost request's
// retry, with its requestId, is answered with its transaction on chain, and nothing is
// executed twice. Equal intents are interchangeable: two identical lost requests' retries
// adopt the two identical transactions, and a third identical request gets a new one.
func TestLostRequestsAreAnsweredWithTheirTransactionsOnChain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sim := newTestChain(t, 250*time.Millisecond)
	dsn := testsupport.MigratedDSN(t)
	opts := serviceOptions{chain: sim, signers: 1, fastPipeline: true, dsn: dsn, chainQuery: true, configure: func(bc *conf.Bootstrap) {
		bc.Nonce.NonceStateTimeout = 0 // every batch asks the chain
	}}
	first := startService(t, opts)
	signer, recipient := devAddress(t, 0), devAddress(t, 4)
	request := func(id, value string) map[string]any {
		return map[string]any{"signer": signer, "to": recipient, "value": value, "gasLimit": 21000, "requestId": id}
	}
	// Nonces 0..4: three distinct intents, then two identical ones.
	sent := []map[string]any{request("kept", "1"), request("lost-a", "2"), request("lost-b", "3"), request("twin-1", "7"), request("twin-2", "7")}
	onChain := map[string]string{} // requestId -> tx hash
	for _, r := range sent {
		id := first.createOK(t, r)
		waitFor(t, 60*time.Second, "transaction "+id+" confirmed", func() bool { return first.tx(t, id).state == "CONFIRMED" })
		onChain[r["requestId"].(string)] = first.tx(t, id).txHash
	}
	first.stop(t)
	// The standby missed everything from nonce 1 on: rows, attempts, completions, cursor.
	loseFromNonceOne(t, first)

	second := startService(t, opts)
	// The first retry finds the chain ahead: the signer recovers, as the alert says.
	requireAlertAnswer(t, "TxmSignerRecovering", second.create(t, request("lost-a", "2")))
	// Retries as a client makes them: a 503 while the signer is being reconciled is retried.
	retry := func(r map[string]any) apiResponse {
		var got apiResponse
		waitFor(t, 60*time.Second, "an answer to "+fmt.Sprint(r["requestId"]), func() bool {
			got = second.create(t, r)
			return got.status != http.StatusServiceUnavailable
		})
		return got
	}
	for _, id := range []string{"lost-a", "lost-b"} {
		want := onChain[id]
		got := retry(request(id, map[string]string{"lost-a": "2", "lost-b": "3"}[id]))
		if got.status != http.StatusOK || got.tx()["txHash"] != want || got.tx()["recovered"] != true {
			t.Fatalf("retry of %s: %d %s, want 200 with its transaction on chain %s, marked recovered", id, got.status, got.raw, want)
		}
	}
	twins := map[string]bool{}
	for _, id := range []string{"twin-1", "twin-2"} {
		got := retry(request(id, "7"))
		hash, _ := got.tx()["txHash"].(string)
		if got.status != http.StatusOK || (hash != onChain["twin-1"] && hash != onChain["twin-2"]) || twins[hash] {
			t.Fatalf("retry of %s: %d %s, want 200 with one of the two identical transactions on chain, not one already adopted", id, got.status, got.raw)
		}
		twins[hash] = true
	}
	third := retry(request("twin-3", "7"))
	if third.status != http.StatusAccepted || third.tx()["nonce"] != "5" || third.tx()["recovered"] != false {
		t.Fatalf("a third identical request: %d %s, want 202 with a new transaction at nonce 5", third.status, third.raw)
	}
	// A replay of an adopted request is a replay like any other.
	if replay := second.create(t, request("lost-a", "2")); replay.status != http.StatusOK || replay.tx()["txHash"] != onChain["lost-a"] {
		t.Fatalf("replay of an adopted request: %d %s", replay.status, replay.raw)
	}
	if conflict := second.create(t, request("lost-a", "9")); conflict.status != http.StatusConflict {
		t.Fatalf("an adopted request with another intent: %d %s, want 409", conflict.status, conflict.raw)
	}
	thirdID, _ := third.tx()["txId"].(string)
	waitFor(t, 60*time.Second, "the new transaction confirmed", func() bool { return second.tx(t, thirdID).state == "CONFIRMED" })

	// On chain: every intent executed exactly as often as it was requested.
	executed := transfersOnChain(t, sim, signer, recipient)
	if want := map[string]int{"1": 1, "2": 1, "3": 1, "7": 3}; !maps.Equal(executed, want) {
		t.Fatalf("executed on chain (value -> count) %v, want %v", executed, want)
	}
	if n := second.count(t, "SELECT count(*) FROM managed_tx WHERE recovered_at IS NOT NULL AND request_id IS NOT NULL"); n != 4 {
		t.Fatalf("%d adopted rows, want 4", n)
	}
	// Every adopted transaction is final with its completion in the feed, marked recovered
	// and naming the request that adopted it.
	completions, err := e2e.NewClient(second.httpURL).ReadCompletions(ctx, 37, 6, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	recoveredFor := map[string]bool{}
	for _, c := range completions {
		if c.GetRecovered() {
			recoveredFor[c.GetRequestId()] = true
		}
	}
	if want := map[string]bool{"lost-a": true, "lost-b": true, "twin-1": true, "twin-2": true}; !maps.Equal(recoveredFor, want) {
		t.Fatalf("completions marked recovered, by request: %v, want %v", recoveredFor, want)
	}
	// The operator's listing shows each lost nonce's intent and the request that adopted it.
	listing := second.do(t, http.MethodGet, "/api/v1/admin/signers/"+signer+"/quarantine?nonces=true", nil)
	unknown, _ := listing.body["unknownNonces"].([]any)
	if listing.status != http.StatusOK || listing.body["quarantined"] == true || len(unknown) != 4 {
		t.Fatalf("quarantine listing after recovery: %d %s, want released with 4 unknown nonces", listing.status, listing.raw)
	}
	adoptedBy := map[string]bool{}
	for _, u := range unknown {
		entry, _ := u.(map[string]any)
		if entry["found"] != true || entry["adopted"] != true || entry["gasLimit"] != "21000" || entry["dataDigest"] == "" || entry["recoveredTxId"] == "" {
			t.Fatalf("unknown nonce entry without its intent or adoption: %v", entry)
		}
		adoptedBy[fmt.Sprint(entry["adoptedByRequestId"])] = true
	}
	if len(adoptedBy) != 4 {
		t.Fatalf("adopted by %v, want four requests", adoptedBy)
	}
	// No signer is left quarantined.
	if n := second.count(t, "SELECT count(*) FROM signer_quarantine WHERE released_at IS NULL"); n != 0 {
		t.Fatalf("%d signers still quarantined", n)
	}
}

// loseFromNonceOne removes from s's database everything of its signers from nonce 1 on
// (rows, attempts, completions, cursor), as a standby that missed those commits, or a
// backup taken before them, would hold; extra statements lose more.
func loseFromNonceOne(t *testing.T, s *testService, extra ...string) {
	t.Helper()
	for _, stmt := range append([]string{
		"DELETE FROM tx_completions WHERE tx_id IN (SELECT tx_id FROM managed_tx WHERE nonce >= 1)",
		"DELETE FROM tx_attempt WHERE nonce >= 1",
		"DELETE FROM managed_tx WHERE nonce >= 1",
		"UPDATE signer_nonce_cursor SET next_nonce = 1",
	}, extra...) {
		if _, err := s.pool.Exec(context.Background(), stmt); err != nil {
			t.Fatal(err)
		}
	}
}

// transfersOnChain counts, by value, the transfers from signer to recipient in every block
// of sim's chain.
func transfersOnChain(t *testing.T, sim *chain.SimulatedChain, signer, recipient string) map[string]int {
	t.Helper()
	ctx := context.Background()
	client := ethClient(t, sim)
	head, err := client.BlockNumber(ctx)
	if err != nil {
		t.Fatal(err)
	}
	executed := map[string]int{}
	for n := uint64(0); n <= head; n++ {
		block, err := client.BlockByNumber(ctx, new(big.Int).SetUint64(n))
		if err != nil {
			t.Fatal(err)
		}
		for _, tx := range block.Transactions() {
			from, err := types.Sender(types.LatestSignerForChainID(tx.ChainId()), tx)
			if err == nil && from.Hex() == signer && tx.To() != nil && tx.To().Hex() == recipient {
				executed[tx.Value().String()]++
			}
		}
	}
	return executed
}
