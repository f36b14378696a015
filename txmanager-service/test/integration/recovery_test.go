package integration

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/conf"
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

// A chain ahead of the database (the last commits lost in a failover, while their
// transactions were mined): the signer is quarantined, creates are refused with a clear
// reason and consume no nonce, the admin API lists the unknown nonces with what the chain
// holds there, and after an operator's release allocation goes on above them.
func TestChainAheadOfTheDatabaseQuarantinesTheSigner(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sim := newTestChain(t, 250*time.Millisecond)
	dsn := testsupport.MigratedDSN(t)
	opts := serviceOptions{chain: sim, signers: 1, fastPipeline: true, dsn: dsn, chainQuery: true, configure: func(bc *conf.Bootstrap) {
		bc.Nonce.NonceStateTimeout = 0 // every batch asks the chain
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
	if refused.status != http.StatusConflict || refused.reason() != "SIGNER_QUARANTINED" {
		t.Fatalf("create with the chain ahead: %d %s, want 409 SIGNER_QUARANTINED", refused.status, refused.raw)
	}
	if n := second.count(t, "SELECT next_nonce FROM signer_nonce_cursor"); n != 3 {
		t.Fatalf("cursor moved to %d while quarantined", n)
	}
	report := second.do(t, http.MethodGet, "/api/v1/admin/signers/"+signer+"/quarantine", nil)
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
		{"?limit=1", fmt.Sprint(unknown[0].(map[string]any)["nonce"]), fmt.Sprint(unknown[1].(map[string]any)["nonce"])},
		{"?limit=1&from_nonce=" + fmt.Sprint(unknown[1].(map[string]any)["nonce"]), fmt.Sprint(unknown[1].(map[string]any)["nonce"]), nil},
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
