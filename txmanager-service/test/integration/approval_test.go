package integration

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// The approval flow on a two-node cluster with a real chain (forward routing): a create
// above the signer's approval threshold, its gas left to the node's estimate, waits without
// a nonce; the requester cannot approve
// it, the same approver cannot count twice, two approvers on different nodes admit it, and
// it is confirmed on chain under the id the create answered. A second intent nobody
// approves expires: final, with its reason, in the completions feed. Bad input to the
// approval calls changes nothing.
func TestTwoApproversAdmitAnIntentThatIsConfirmedOnChain(t *testing.T) {
	t.Parallel()
	keys := map[string]string{"payouts": "approval-payouts-key", "alice": "approval-alice-key", "bob": "approval-bob-key", "carol": "approval-carol-key", "ops": "approval-ops-key"}
	sim := newTestChain(t, 250*time.Millisecond)
	dsn := testsupport.MigratedDSN(t)
	nodes := make([]*testService, 2)
	for i := range nodes {
		nodes[i] = startService(t, serviceOptions{chain: sim, signers: 2, fastPipeline: true, dsn: dsn, configure: func(bc *conf.Bootstrap) {
			bc.Routing.Mode = conf.RoutingForward
			bc.Create.ApprovalInterval = conf.Duration(200 * time.Millisecond)
			bc.Auth = conf.Auth{Enabled: true, Roles: []string{"approver"}, APIKeys: []conf.APIKey{
				// The requester holds the role too: it is refused as the requester, not for the role.
				{ID: "payouts", SHA256: sha256Hex(keys["payouts"]), Signers: []string{"*"}, Roles: []string{"approver"}},
				{ID: "alice", SHA256: sha256Hex(keys["alice"]), Signers: []string{"*"}, Roles: []string{"approver"}},
				{ID: "bob", SHA256: sha256Hex(keys["bob"]), Signers: []string{"*"}, Roles: []string{"approver"}},
				{ID: "carol", SHA256: sha256Hex(keys["carol"]), Signers: []string{"*"}},
				{ID: "ops", SHA256: sha256Hex(keys["ops"]), Signers: []string{"*"}, Admin: true},
			}}
		}})
	}
	call := func(node int, who, method, path string, body any) apiResponse {
		t.Helper()
		var raw []byte
		if body != nil {
			raw, _ = json.Marshal(body)
		}
		return nodes[node].doAs(t, method, path, raw, "X-API-Key", keys[who])
	}
	signer, to := devAddress(t, 0), devAddress(t, 7)
	policy := map[string]any{"policy": map[string]any{"approval": map[string]any{"aboveValue": "1000000000000000", "approvers": 2, "expiresAfter": "10s"}}}
	if a := call(0, "ops", http.MethodPut, "/api/v1/admin/policies/signer/"+signer, policy); a.status != http.StatusOK {
		t.Fatalf("set the approval policy: %d %s", a.status, a.raw)
	}
	for _, bad := range []struct {
		name   string
		policy map[string]any
	}{
		{"an unknown role", map[string]any{"approval": map[string]any{"aboveValue": "1", "approvers": 2, "role": "treasury"}}},
		{"no approvers", map[string]any{"approval": map[string]any{"aboveValue": "1", "approvers": 0}}},
		{"an absurd count", map[string]any{"approval": map[string]any{"aboveValue": "1", "approvers": 1000}}},
	} {
		if a := call(0, "ops", http.MethodPut, "/api/v1/admin/policies/signer/"+signer, map[string]any{"policy": bad.policy}); a.status != http.StatusBadRequest {
			t.Fatalf("%s: %d %s, want 400", bad.name, a.status, a.raw)
		}
	}
	if a := call(0, "ops", http.MethodGet, "/api/v1/admin/policies/signer/"+signer, nil); a.body["version"] != "1" && a.body["version"] != float64(1) {
		t.Fatalf("refused policies changed the policy: %s", a.raw)
	}

	// estimated leaves the gas limit to the node's estimate: the create, and the admission
	// of its approval, ask the chain before they are written.
	const estimated = 0
	create := func(node int, requestID, value string, gasLimit int) apiResponse {
		body := map[string]any{"signer": signer, "to": to, "value": value, "requestId": requestID}
		if gasLimit != estimated {
			body["gasLimit"] = gasLimit
		}
		return call(node, "payouts", http.MethodPost, "/api/v1/tx", body)
	}
	waiting := create(1, "approve-me", "2000000000000000", estimated)
	if waiting.status != http.StatusAccepted || waiting.tx()["state"] != "AWAITING_APPROVAL" || waiting.tx()["txHash"] != "" {
		t.Fatalf("a create above the threshold: %d %s, want 202 AWAITING_APPROVAL", waiting.status, waiting.raw)
	}
	id := waiting.tx()["txId"].(string)
	if replay := create(0, "approve-me", "2000000000000000", estimated); replay.status != http.StatusOK || replay.tx()["txId"] != id {
		t.Fatalf("the waiting request's retry on the other node: %d %s, want 200 with the same id", replay.status, replay.raw)
	}
	var holding int
	if err := nodes[0].pool.QueryRow(t.Context(), `SELECT count(*) FROM managed_tx WHERE tx_id = $1`, id).Scan(&holding); err != nil || holding != 0 {
		t.Fatalf("the waiting intent has a transaction row (%d, %v): it must hold no nonce", holding, err)
	}

	approve := func(node int, who, approvalID string) apiResponse {
		return call(node, who, http.MethodPost, "/api/v1/approvals/"+approvalID+"/approve", map[string]any{"note": "invoice 118 checked"})
	}
	for _, step := range []struct {
		name       string
		answer     apiResponse
		wantStatus int
		wantReason string
	}{
		{"the requester approving its own intent", approve(0, "payouts", id), http.StatusForbidden, "APPROVAL_FORBIDDEN"},
		{"a credential without the role", approve(1, "carol", id), http.StatusForbidden, "APPROVAL_FORBIDDEN"},
		{"the first approver", approve(0, "alice", id), http.StatusOK, ""},
		{"the first approver again, on the other node", approve(1, "alice", id), http.StatusConflict, "ALREADY_DECIDED"},
		{"an unknown approval", approve(0, "bob", "01a2269c-ebf2-78ec-aa33-35cdbb277a0c"), http.StatusNotFound, "NOT_FOUND"},
		{"a malformed id", approve(0, "bob", "not-an-id"), http.StatusBadRequest, "INVALID_ARGUMENT"},
		{"a note too long", call(0, "bob", http.MethodPost, "/api/v1/approvals/"+id+"/approve", map[string]any{"note": string(make([]byte, 600))}), http.StatusBadRequest, "INVALID_ARGUMENT"},
		{"the second approver, on the other node", approve(1, "bob", id), http.StatusOK, ""},
	} {
		if step.answer.status != step.wantStatus || (step.wantReason != "" && step.answer.reason() != step.wantReason) {
			t.Fatalf("%s: %d %s, want %d %s", step.name, step.answer.status, step.answer.raw, step.wantStatus, step.wantReason)
		}
		t.Logf("%s: %d %s", step.name, step.answer.status, step.answer.reason())
	}

	confirmed := call(0, "payouts", http.MethodGet, "/api/v1/tx/"+id+"?wait=30s", nil)
	for deadline := time.Now().Add(time.Minute); confirmed.body["state"] != "CONFIRMED" && time.Now().Before(deadline); {
		confirmed = call(0, "payouts", http.MethodGet, "/api/v1/tx/"+id+"?wait=30s", nil)
	}
	if confirmed.body["state"] != "CONFIRMED" || confirmed.body["receipt"] == nil {
		t.Fatalf("the approved intent: %s, want CONFIRMED with its receipt", confirmed.raw)
	}
	approval := call(1, "alice", http.MethodGet, "/api/v1/approvals/"+id, nil)
	if approval.body["state"] != "ADMITTED" || approval.body["approvals"] != float64(2) {
		t.Fatalf("the approval after the admission: %s", approval.raw)
	}
	t.Logf("approved intent %s confirmed at nonce %v in block %v", id, confirmed.body["nonce"], confirmed.body["receipt"].(map[string]any)["blockNumber"])

	// Nobody approves the next one: it expires, final, in the feed with its reason.
	expiring := create(0, "let-it-expire", "3000000000000000", 21000)
	if expiring.status != http.StatusAccepted || expiring.tx()["state"] != "AWAITING_APPROVAL" {
		t.Fatalf("the second create above the threshold: %d %s", expiring.status, expiring.raw)
	}
	expiringID := expiring.tx()["txId"].(string)
	if a := approve(1, "alice", expiringID); a.status != http.StatusOK {
		t.Fatalf("one approval of two: %d %s", a.status, a.raw)
	}
	var completion map[string]any
	cursor := ""
	waitFor(t, 40*time.Second, "the expiry in the completions feed", func() bool {
		page := call(1, "payouts", http.MethodGet, "/api/v1/tx/completions?limit=100&wait=5s&after="+cursor, nil)
		items, _ := page.body["completions"].([]any)
		for _, item := range items {
			if c := item.(map[string]any); c["txId"] == expiringID {
				completion = c
			}
		}
		if next, ok := page.body["next"].(string); ok {
			cursor = next
		}
		return completion != nil
	})
	if completion["status"] != "EXPIRED" || completion["requestId"] != "let-it-expire" || completion["reason"] == nil || completion["reason"] == "" {
		t.Fatalf("the expiry's completion: %v, want EXPIRED with its request id and reason", completion)
	}
	if tx := call(0, "payouts", http.MethodGet, "/api/v1/tx/"+expiringID, nil); tx.body["state"] != "EXPIRED" {
		t.Fatalf("the expired intent read by id: %s", tx.raw)
	}
	if late := approve(0, "bob", expiringID); late.status != http.StatusConflict || late.reason() != "APPROVAL_CLOSED" {
		t.Fatalf("an approval after the expiry: %d %s, want 409 APPROVAL_CLOSED", late.status, late.raw)
	}
	t.Logf("expired intent %s in the feed: %s", expiringID, completion["reason"])

	audit := call(0, "ops", http.MethodGet, "/api/v1/admin/audit?action=approval.vote", nil)
	records, _ := audit.body["records"].([]any)
	if len(records) != 3 {
		t.Fatalf("the audit trail holds %d approval votes, want 3: %s", len(records), audit.raw)
	}
	if verified := call(1, "ops", http.MethodGet, "/api/v1/admin/audit/verify", nil); verified.body["ok"] != true {
		t.Fatalf("audit verify: %s", verified.raw)
	}
}
