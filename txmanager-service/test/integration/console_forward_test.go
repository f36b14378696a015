package integration

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// An operator signed in to the console of a node that does not hold a signer's lease
// resolves that signer's stuck transaction: the action goes to the owner carrying the
// session's credential, which the owner checks again. Before, the forward carried the
// browser's headers, which hold only the session cookie, and the owner answered 401. A
// form holding a NUL character is refused as the API refuses it (before, a 500). The same
// resolve form sent twice signs once: the second names an attempt that is no longer the
// transaction's (before, each submit signed another, at a higher fee).
func TestConsoleResolvesAStuckTransactionThroughANodeThatIsNotItsOwner(t *testing.T) {
	t.Parallel()
	sim := newTestChain(t, 250*time.Millisecond)
	dsn := testsupport.MigratedDSN(t)
	nodes := make([]*testService, 2)
	for i := range nodes {
		nodes[i] = startService(t, serviceOptions{chain: sim, signers: 1, fastPipeline: true, dsn: dsn, configure: func(bc *conf.Bootstrap) {
			bc.Routing.Mode = conf.RoutingForward
			bc.Lease.Duration, bc.Lease.RenewInterval, bc.Lease.ClockSkew = conf.Duration(3*time.Second), conf.Duration(time.Second), conf.Duration(200*time.Millisecond)
			bc.Routing.HeartbeatInterval, bc.Routing.NodeTimeout = conf.Duration(500*time.Millisecond), conf.Duration(2*time.Second)
			bc.Auth = conf.Auth{Enabled: true, APIKeys: []conf.APIKey{{ID: "ops", SHA256: sha256Hex(adminKey), Signers: []string{"*"}, Admin: true}}}
			bc.Resubmit.Interval = conf.Duration(300 * time.Millisecond)
			bc.Stuck.MinAge, bc.Stuck.MinAttempts, bc.Stuck.Action = conf.Duration(time.Second), 2, "noop"
		}})
	}
	signer := devAddress(t, 0)
	// A fee cap of 1 wei stays under the base fee: the transaction waits until it is stuck.
	body, _ := json.Marshal(map[string]any{"signer": signer, "to": devAddress(t, 7), "value": "1", "gasLimit": 21000, "maxFeePerGas": "1", "maxPriorityFeePerGas": "1"})
	created := nodes[0].doAs(t, http.MethodPost, "/api/v1/tx", body, "X-API-Key", adminKey)
	if created.status != http.StatusAccepted {
		t.Fatalf("create: %d %s", created.status, created.raw)
	}
	head := created.tx()["txId"].(string)
	waitFor(t, 30*time.Second, "the transaction marked STUCK", func() bool {
		return nodes[0].count(t, "SELECT count(*) FROM managed_tx WHERE tx_id = $1 AND state = 'STUCK'", head) == 1
	})
	owner, _ := services.SplitLeaseOwner(nodes[0].leaseOwner(t, signer))
	other := nodes[0]
	if other.nodeID == owner {
		other = nodes[1]
	}
	if other.nodeID == owner {
		t.Fatalf("both nodes are named %s", owner)
	}

	client, csrf := consoleSession(t, other.httpURL, adminKey)
	// A note no text column can hold is refused with a page saying why, not a failure.
	withNUL, err := client.PostForm(other.httpURL+"/console/act", url.Values{"csrf": {csrf}, "action": {"pause"}, "signer": {signer}, "note": {"a\x00b"}, "back": {"/console"}})
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(withNUL.Body)
	_ = withNUL.Body.Close()
	if withNUL.StatusCode != http.StatusBadRequest || !strings.Contains(string(page), "NUL character") {
		t.Fatalf("a pause whose note holds a NUL: %d, want 400 saying why:\n%.300s", withNUL.StatusCode, page)
	}
	if paused := nodes[0].count(t, "SELECT count(*) FROM audit_record WHERE action = 'signer.pause'"); paused != 0 {
		t.Fatalf("%d pauses recorded for a refused form", paused)
	}
	var shown string
	if err := nodes[0].pool.QueryRow(t.Context(), "SELECT tx_hash FROM managed_tx WHERE tx_id = $1", head).Scan(&shown); err != nil {
		t.Fatal(err)
	}
	attemptsBefore := nodes[0].count(t, "SELECT count(*) FROM tx_attempt WHERE tx_id = $1", head)
	form := url.Values{"csrf": {csrf}, "action": {"resolve"}, "tx": {head}, "seen": {shown},
		"resolution": {"CANCEL"}, "note": {"ops ticket 9"}, "back": {"/console/stuck"}}
	resp, err := client.PostForm(other.httpURL+"/console/act", form)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if location := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.Contains(location, "done=") {
		t.Fatalf("resolve through node %s, the owner being %s: %d, to %q; want 303 back to the stuck page saying it was done", other.nodeID, owner, resp.StatusCode, location)
	}
	// The same form again (a double click, the back button): the transaction is no longer
	// what the page showed, and nothing more is signed.
	again, err := client.PostForm(other.httpURL+"/console/act", form)
	if err != nil {
		t.Fatal(err)
	}
	_ = again.Body.Close()
	if location := again.Header.Get("Location"); again.StatusCode != http.StatusSeeOther || !strings.Contains(location, "error=") || !strings.Contains(location, "changed") {
		t.Fatalf("the same resolve form again: %d, to %q; want 303 back saying the transaction changed", again.StatusCode, location)
	}
	if signed := nodes[0].count(t, "SELECT count(*) FROM tx_attempt WHERE tx_id = $1", head) - attemptsBefore; signed != 1 {
		t.Fatalf("%d attempts signed by two submits of one form, want 1", signed)
	}
	audits := nodes[0].audits(t, head)
	last := audits[len(audits)-1]
	if by, _ := services.SplitLeaseOwner(last.node); last.action != "CANCEL" || by != owner || last.reason != "ops ticket 9" {
		t.Fatalf("last resolution on record: %+v, want CANCEL by the owner %s with the operator's note", last, owner)
	}
	waitFor(t, 60*time.Second, "the stuck transaction cancelled", func() bool {
		return nodes[0].count(t, "SELECT count(*) FROM managed_tx WHERE tx_id = $1 AND state = 'FAILED_FINAL' AND sub_state = 'CANCELLED'", head) == 1
	})
}
