package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/crypto"
	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	khttp "github.com/go-kratos/kratos/v2/transport/http"

	"github.com/bionicotaku/txmanager-service/api/openapi"
	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
	"github.com/bionicotaku/txmanager-service/internal/chain"
	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/internal/controllers"
)

// loadOpenAPI reads the API module's document and makes it strict for answers: every
// schema that lists required properties (those of responses, which the service writes
// whole, and the error body) admits no other property either, so an answer with a field
// the document does not name (a proto field renamed or added without make generate) fails
// as surely as one missing a field.
func loadOpenAPI(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(openapi.YAML)
	if err != nil {
		t.Fatalf("load api/openapi/openapi.yaml: %v", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("api/openapi/openapi.yaml is not a valid OpenAPI 3 document: %v", err)
	}
	closed := false
	for _, schema := range doc.Components.Schemas {
		if len(schema.Value.Required) > 0 {
			schema.Value.AdditionalProperties = openapi3.AdditionalProperties{Has: new(false)}
			closed = true
		}
	}
	if !closed {
		t.Fatal("no schema of the document lists required properties: the response schemas lost them")
	}
	return doc
}

// operationKey names a route the same way in the document and the router: parameter names
// differ ({txId} there, {tx_id} here), so they are dropped.
func operationKey(method, path string) string {
	return method + " " + regexp.MustCompile(`\{[^}]+\}`).ReplaceAllString(path, "{}")
}

// The document and the hand-written HTTP bindings name the same routes.
func TestOpenAPIDocumentMatchesTheRoutes(t *testing.T) {
	doc := loadOpenAPI(t)
	var documented []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented = append(documented, operationKey(method, path))
		}
	}
	srv := khttp.NewServer()
	v1.RegisterTxServiceHTTPServer(srv, (*controllers.TxController)(nil), v1.HTTPOptions{})
	v1.RegisterAdminServiceHTTPServer(srv, (*controllers.AdminController)(nil), v1.HTTPOptions{})
	var served []string
	if err := srv.WalkRoute(func(r khttp.RouteInfo) error {
		served = append(served, operationKey(r.Method, r.Path))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	slices.Sort(documented)
	slices.Sort(served)
	if !slices.Equal(documented, served) {
		t.Fatalf("the OpenAPI document names\n  %s\nthe HTTP bindings serve\n  %s", strings.Join(documented, "\n  "), strings.Join(served, "\n  "))
	}
}

// openAPICheck sends requests to a running service and validates each answer (and, for a
// well-formed request, the request too) against the document, counting which operations
// answered a success and which an error.
type openAPICheck struct {
	t       *testing.T
	s       *testService
	doc     *openapi3.T
	router  routers.Router
	success map[string]bool
	failure map[string]bool
}

// call sends method path with body (JSON when not empty) and key, and validates: the answer
// must have status want and match the document; a request sent as the document describes
// it (wellFormed) must match it too. It returns the decoded answer.
func (c *openAPICheck) call(method, path, key string, body any, want int, wellFormed bool) map[string]any {
	c.t.Helper()
	var raw []byte
	if body != nil {
		if s, ok := body.(string); ok {
			raw = []byte(s)
		} else {
			raw, _ = json.Marshal(body)
		}
	}
	req, err := http.NewRequest(method, c.s.httpURL+path, bytes.NewReader(raw))
	if err != nil {
		c.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		req.Header.Set("X-API-Key", key)
	}
	resp, err := c.s.http.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	answer, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != want {
		c.t.Fatalf("%s %s answered %d %s, want %d", method, path, resp.StatusCode, answer, want)
	}
	// The router matches on the request as sent (its body already read by the client).
	req.Body = io.NopCloser(bytes.NewReader(raw))
	route, params, err := c.router.FindRoute(req)
	if err != nil {
		c.t.Fatalf("%s %s is not in the OpenAPI document: %v", method, path, err)
	}
	options := &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc, IncludeResponseStatus: true, MultiError: true}
	input := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: options}
	ctx := context.Background()
	if wellFormed {
		if err := openapi3filter.ValidateRequest(ctx, input); err != nil {
			c.t.Fatalf("%s %s: the request does not match the document: %v", method, path, err)
		}
	}
	if err := openapi3filter.ValidateResponse(ctx, &openapi3filter.ResponseValidationInput{
		RequestValidationInput: input, Status: resp.StatusCode, Header: resp.Header, Body: io.NopCloser(bytes.NewReader(answer)), Options: options,
	}); err != nil {
		c.t.Fatalf("%s %s answered %d %s\nwhich does not match the document: %v", method, path, resp.StatusCode, answer, err)
	}
	op := operationKey(method, route.Path)
	if want < 300 {
		c.success[op] = true
	} else {
		c.failure[op] = true
	}
	var decoded map[string]any
	_ = json.Unmarshal(answer, &decoded)
	return decoded
}

// Every route of the HTTP API answers, in success and in error, exactly what the OpenAPI
// document says: real answers of a real service (auth on, the embedded chain, PostgreSQL),
// validated with kin-openapi. The document is the one the API module ships and the
// service serves.
func TestOpenAPIDocumentDescribesEveryAnswer(t *testing.T) {
	t.Parallel()
	adminKey, callerKey, approverA, approverB := "openapi-admin-key", "openapi-caller-key", "openapi-approver-a", "openapi-approver-b"
	// A keystore for the roster routes: one key at start, one added at run time.
	keyDir, passFile := t.TempDir(), filepath.Join(t.TempDir(), "passphrase")
	if err := os.WriteFile(passFile, []byte("openapi"), 0o600); err != nil {
		t.Fatal(err)
	}
	startKey, addedKey := newSignerKey(t), newSignerKey(t)
	writeKeystoreFile(t, keyDir, "openapi", startKey)
	s := startService(t, serviceOptions{fastPipeline: true, configure: func(bc *conf.Bootstrap) {
		bc.Auth = conf.Auth{Enabled: true, APIKeys: []conf.APIKey{
			{ID: "operator", SHA256: sha256Hex(adminKey), Signers: []string{"*"}, Admin: true},
			{ID: "caller", SHA256: sha256Hex(callerKey), Signers: []string{"*"}, Roles: []string{"approver"}},
			{ID: "approver-a", SHA256: sha256Hex(approverA), Signers: []string{"*"}, Roles: []string{"approver"}},
			{ID: "approver-b", SHA256: sha256Hex(approverB), Signers: []string{"*"}, Roles: []string{"approver"}},
		}, Roles: []string{"approver"}}
		bc.Signers.Keystore = conf.KeystoreSource{Dir: keyDir, Addresses: []string{crypto.PubkeyToAddress(startKey.PublicKey).Hex()}, PassphraseFile: passFile}
	}})
	doc := loadOpenAPI(t)
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	c := &openAPICheck{t: t, s: s, doc: doc, router: router, success: map[string]bool{}, failure: map[string]bool{}}

	served, err := s.http.Get(s.httpURL + "/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(served.Body)
	_ = served.Body.Close()
	if served.StatusCode != http.StatusOK || !bytes.Equal(body, openapi.YAML) {
		t.Fatalf("GET /openapi.yaml: %d, %d bytes; want 200 with the API module's document (%d bytes)", served.StatusCode, len(body), len(openapi.YAML))
	}

	signer, to, quarantined := devAddress(t, 0), devAddress(t, 5), devAddress(t, 6)
	create := map[string]any{"signer": signer, "to": to, "value": "1000", "gasLimit": "21000", "requestId": "openapi-1"}

	// Transactions.
	created := c.call("POST", "/api/v1/tx", callerKey, create, http.StatusAccepted, true)
	txID := created["tx"].(map[string]any)["txId"].(string)
	c.call("POST", "/api/v1/tx", callerKey, create, http.StatusOK, true) // the replay
	c.call("POST", "/api/v1/tx", callerKey, map[string]any{"signer": signer, "to": to, "value": "2", "gasLimit": "21000", "requestId": "openapi-1"}, http.StatusConflict, true)
	c.call("POST", "/api/v1/tx", callerKey, map[string]any{"signer": "0x0000000000000000000000000000000000000001", "to": to, "gasLimit": "21000", "requestId": "openapi-2"}, http.StatusUnprocessableEntity, true)
	c.call("POST", "/api/v1/tx", callerKey, `{"signer": "`+signer+`", "gasLimt": 1}`, http.StatusBadRequest, false)
	c.call("POST", "/api/v1/tx", "", create, http.StatusUnauthorized, true)
	batch := map[string]any{"creates": []any{create, map[string]any{"signer": signer, "to": "not-an-address", "gasLimit": "21000", "requestId": "openapi-batch-2"},
		map[string]any{"signer": signer, "to": to, "value": "3", "gasLimit": "21000", "requestId": "openapi-batch-3"}}}
	if answered := c.call("POST", "/api/v1/tx:batch", callerKey, batch, http.StatusOK, true); fmt.Sprint(answered["created"], answered["replayed"], answered["refused"]) != "1 1 1" {
		t.Fatalf("a batch of a replay, a bad create and a new one: %v", answered)
	}
	c.call("POST", "/api/v1/tx:batch", callerKey, map[string]any{"creates": []any{}}, http.StatusBadRequest, true)
	waitFor(t, time.Minute, "the transaction confirmed", func() bool { return s.tx(t, txID).state == "CONFIRMED" })
	final := c.call("GET", "/api/v1/tx/"+txID, callerKey, nil, http.StatusOK, true)
	if final["receipt"] == nil || final["confirmedAt"] == nil {
		t.Fatalf("a confirmed transaction without its receipt: %v", final)
	}
	c.call("GET", "/api/v1/tx/"+txID+"?wait=2s", callerKey, nil, http.StatusOK, true)
	c.call("GET", "/api/v1/tx/00000000-0000-7000-8000-000000000000", callerKey, nil, http.StatusNotFound, true)
	c.call("GET", "/api/v1/tx/by-request?signer="+signer+"&requestId=openapi-1&wait=1s", callerKey, nil, http.StatusOK, true)
	c.call("GET", "/api/v1/tx/by-request?signer="+signer+"&requestId=never-sent", callerKey, nil, http.StatusNotFound, true)
	// An open transaction: nulls where it has no receipt yet (its fee cap of 1 wei is below
	// any base fee, so it is never mined), and one to resolve.
	open := c.call("POST", "/api/v1/tx", callerKey, map[string]any{"signer": devAddress(t, 1), "to": to, "value": "1", "gasLimit": "21000",
		"maxFeePerGas": "1", "maxPriorityFeePerGas": "1", "requestId": "openapi-open"}, http.StatusAccepted, true)
	openID := open["tx"].(map[string]any)["txId"].(string)
	if tx := open["tx"].(map[string]any); tx["receipt"] != nil || tx["confirmedAt"] != nil {
		t.Fatalf("a new transaction with a receipt: %v", tx)
	}
	page := c.call("GET", "/api/v1/tx/completions?limit=10&wait=1s", callerKey, nil, http.StatusOK, true)
	c.call("GET", "/api/v1/tx/completions?after="+fmt.Sprint(page["next"]), callerKey, nil, http.StatusOK, true)
	c.call("GET", "/api/v1/tx/completions?limit=5000", callerKey, nil, http.StatusBadRequest, false)

	// Operators.
	c.call("GET", "/api/v1/admin/signers", adminKey, nil, http.StatusOK, true)
	c.call("GET", "/api/v1/admin/signers", callerKey, nil, http.StatusForbidden, true)
	c.call("GET", "/api/v1/admin/signers/"+signer, adminKey, nil, http.StatusOK, true)
	c.call("GET", "/api/v1/admin/signers/not-an-address", adminKey, nil, http.StatusBadRequest, true)
	c.call("GET", "/api/v1/admin/nodes", adminKey, nil, http.StatusOK, true)
	c.call("GET", "/api/v1/admin/nodes", "", nil, http.StatusUnauthorized, true)
	c.call("GET", "/api/v1/admin/stuck?signer="+signer+"&limit=10", adminKey, nil, http.StatusOK, true)
	c.call("GET", "/api/v1/admin/stuck?limit=5000", adminKey, nil, http.StatusBadRequest, false)
	waitFor(t, time.Minute, "the open transaction broadcast", func() bool { return s.tx(t, openID).state == "TRACKING" })
	c.call("POST", "/api/v1/admin/tx/"+openID+"/resolve", adminKey, map[string]any{"action": "NOOP", "reason": "openapi check"}, http.StatusOK, true)
	c.call("POST", "/api/v1/admin/tx/00000000-0000-7000-8000-000000000000/resolve", adminKey, map[string]any{"action": "NOOP"}, http.StatusNotFound, true)
	// A quarantine as a failover leaves it: the chain one nonce ahead of the database.
	if _, err := s.pool.Exec(context.Background(), `INSERT INTO signer_quarantine (chain_id, signer, db_next_nonce, chain_nonce, detected_by, fencing_token)
		VALUES ($1, $2, 0, 1, 'openapi-test', 1)`, chain.SimulatedChainID, quarantined); err != nil {
		t.Fatal(err)
	}
	report := c.call("GET", "/api/v1/admin/signers/"+quarantined+"/quarantine?fromNonce=0&limit=5", adminKey, nil, http.StatusOK, true)
	if report["quarantined"] != true || report["releasedAt"] != nil {
		t.Fatalf("quarantine report: %v", report)
	}
	c.call("GET", "/api/v1/admin/signers/"+quarantined+"/quarantine?fromNonce=-1", adminKey, nil, http.StatusBadRequest, false)
	c.call("POST", "/api/v1/admin/signers/"+quarantined+"/release", adminKey, map[string]any{"note": "openapi check"}, http.StatusOK, true)
	c.call("POST", "/api/v1/admin/signers/"+quarantined+"/release", adminKey, map[string]any{"note": "again"}, http.StatusNotFound, true)

	// The signer roster.
	added := crypto.PubkeyToAddress(addedKey.PublicKey).Hex()
	writeKeystoreFile(t, keyDir, "openapi", addedKey)
	if row := c.call("POST", "/api/v1/admin/roster", adminKey, map[string]any{"signer": added, "source": "keystore", "note": "openapi check"}, http.StatusOK, true); row["state"] != "active" {
		t.Fatalf("added signer: %v", row)
	}
	c.call("POST", "/api/v1/admin/roster", adminKey, map[string]any{"signer": added, "source": "vault"}, http.StatusBadRequest, true)
	c.call("POST", "/api/v1/admin/roster", adminKey, map[string]any{"signer": added, "source": "awsKms", "keyRef": "alias/other"}, http.StatusConflict, true)
	c.call("GET", "/api/v1/admin/roster", adminKey, nil, http.StatusOK, true)
	c.call("GET", "/api/v1/admin/roster", callerKey, nil, http.StatusForbidden, true)
	if row := c.call("POST", "/api/v1/admin/roster/"+added+"/retire", adminKey, map[string]any{"note": "openapi check"}, http.StatusOK, true); row["state"] != "retired" {
		t.Fatalf("retired signer with nothing unfinished: %v", row)
	}
	c.call("POST", "/api/v1/admin/roster/0x0000000000000000000000000000000000000009/retire", adminKey, map[string]any{}, http.StatusUnprocessableEntity, true)
	c.call("POST", "/api/v1/tx", callerKey, map[string]any{"signer": added, "to": to, "gasLimit": "21000", "requestId": "openapi-retired"}, http.StatusConflict, true)

	// Safety rails: a spending policy on the caller's credential, a pause, the audit trail.
	policyPath := "/api/v1/admin/policies/credential/caller"
	c.call("PUT", policyPath, adminKey, map[string]any{"policy": map[string]any{"maxValuePerTx": "5", "windows": []any{map[string]any{"period": "24h", "maxValue": "100"}}}}, http.StatusOK, true)
	c.call("PUT", policyPath, adminKey, map[string]any{"policy": map[string]any{"maxValuePerTx": "-1"}}, http.StatusBadRequest, true)
	if denied := c.call("POST", "/api/v1/tx", callerKey, map[string]any{"signer": signer, "to": to, "value": "6", "gasLimit": "21000", "requestId": "openapi-denied"},
		http.StatusForbidden, true); denied["reason"] != "POLICY_DENIED" {
		t.Fatalf("a create above maxValuePerTx: %v", denied)
	}
	c.call("GET", policyPath, adminKey, nil, http.StatusOK, true)
	c.call("GET", "/api/v1/admin/policies/credential/nobody", adminKey, nil, http.StatusNotFound, true)
	c.call("GET", policyPath+"/versions", adminKey, nil, http.StatusOK, true)
	c.call("GET", "/api/v1/admin/policies/team/caller/versions", adminKey, nil, http.StatusBadRequest, true)
	c.call("GET", "/api/v1/admin/policies", adminKey, nil, http.StatusOK, true)
	c.call("GET", "/api/v1/admin/policies", callerKey, nil, http.StatusForbidden, true)
	c.call("DELETE", policyPath, adminKey, nil, http.StatusOK, true)
	c.call("DELETE", policyPath, adminKey, nil, http.StatusNotFound, true)
	paused := devAddress(t, 1)
	if row := c.call("POST", "/api/v1/admin/roster/"+paused+"/pause", adminKey, map[string]any{"note": "openapi check"}, http.StatusOK, true); row["pausedAt"] == nil {
		t.Fatalf("paused signer without pausedAt: %v", row)
	}
	c.call("POST", "/api/v1/admin/roster/not-an-address/pause", adminKey, map[string]any{}, http.StatusBadRequest, true)
	c.call("POST", "/api/v1/tx", callerKey, map[string]any{"signer": paused, "to": to, "gasLimit": "21000", "requestId": "openapi-paused"}, http.StatusConflict, true)
	c.call("POST", "/api/v1/admin/roster/"+paused+"/resume", adminKey, map[string]any{"note": "openapi check"}, http.StatusOK, true)
	c.call("POST", "/api/v1/admin/roster/"+paused+"/resume", callerKey, map[string]any{}, http.StatusForbidden, true)
	c.call("GET", "/api/v1/admin/audit?limit=10&action=policy.set", adminKey, nil, http.StatusOK, true)
	c.call("GET", "/api/v1/admin/audit?limit=5000", adminKey, nil, http.StatusBadRequest, false)
	if verified := c.call("GET", "/api/v1/admin/audit/verify", adminKey, nil, http.StatusOK, true); verified["ok"] != true {
		t.Fatalf("audit verify on an untouched trail: %v", verified)
	}
	c.call("GET", "/api/v1/admin/audit/verify", callerKey, nil, http.StatusForbidden, true)

	// Approvals: the signer's policy sends intents above 10 wei to two approvers.
	approvalPolicy := "/api/v1/admin/policies/signer/" + signer
	c.call("PUT", approvalPolicy, adminKey, map[string]any{"policy": map[string]any{"approval": map[string]any{"aboveValue": "10", "approvers": 2, "expiresAfter": "1h"}}}, http.StatusOK, true)
	c.call("PUT", approvalPolicy, adminKey, map[string]any{"policy": map[string]any{"approval": map[string]any{"aboveValue": "10", "approvers": 2, "role": "treasury"}}}, http.StatusBadRequest, true)
	waiting := c.call("POST", "/api/v1/tx", callerKey, map[string]any{"signer": signer, "to": to, "value": "11", "gasLimit": "21000", "requestId": "openapi-approval"}, http.StatusAccepted, true)
	waitingTx := waiting["tx"].(map[string]any)
	if waitingTx["state"] != "AWAITING_APPROVAL" {
		t.Fatalf("a create above the approval threshold: %v", waitingTx)
	}
	approvalID := waitingTx["txId"].(string)
	if tx := c.call("GET", "/api/v1/tx/"+approvalID, callerKey, nil, http.StatusOK, true); tx["state"] != "AWAITING_APPROVAL" {
		t.Fatalf("the waiting intent read by id: %v", tx)
	}
	c.call("GET", "/api/v1/approvals?state=AWAITING_APPROVAL&limit=10", callerKey, nil, http.StatusOK, true)
	c.call("GET", "/api/v1/approvals?state=WAITING", callerKey, nil, http.StatusBadRequest, true)
	c.call("GET", "/api/v1/approvals/"+approvalID, callerKey, nil, http.StatusOK, true)
	c.call("GET", "/api/v1/approvals/00000000-0000-7000-8000-000000000000", callerKey, nil, http.StatusNotFound, true)
	if refused := c.call("POST", "/api/v1/approvals/"+approvalID+"/approve", callerKey, map[string]any{"note": "mine"}, http.StatusForbidden, true); refused["reason"] != "APPROVAL_FORBIDDEN" {
		t.Fatalf("the requester approving its own intent: %v", refused)
	}
	if one := c.call("POST", "/api/v1/approvals/"+approvalID+"/approve", approverA, map[string]any{"note": "checked"}, http.StatusOK, true); one["approvals"] != float64(1) {
		t.Fatalf("the first approval: %v", one)
	}
	if twice := c.call("POST", "/api/v1/approvals/"+approvalID+"/approve", approverA, map[string]any{}, http.StatusConflict, true); twice["reason"] != "ALREADY_DECIDED" {
		t.Fatalf("approving twice: %v", twice)
	}
	if rejected := c.call("POST", "/api/v1/approvals/"+approvalID+"/reject", approverB, map[string]any{"note": "wrong amount"}, http.StatusOK, true); rejected["state"] != "REJECTED" {
		t.Fatalf("a rejection: %v", rejected)
	}
	c.call("POST", "/api/v1/approvals/not-an-id/reject", approverB, map[string]any{}, http.StatusBadRequest, true)
	if tx := c.call("GET", "/api/v1/tx/"+approvalID+"?wait=1s", callerKey, nil, http.StatusOK, true); tx["state"] != "REJECTED" {
		t.Fatalf("the rejected intent read by id: %v", tx)
	}
	c.call("DELETE", approvalPolicy, adminKey, nil, http.StatusOK, true)

	// Webhook subscriptions (a development service: loopback receivers are allowed).
	hook := c.call("POST", "/api/v1/admin/webhooks", adminKey, map[string]any{"url": "http://127.0.0.1:9/hook", "states": []string{"CONFIRMED"}, "description": "openapi check"},
		http.StatusOK, true)
	if hook["secret"] == "" || hook["webhook"] == nil {
		t.Fatalf("a new subscription without its secret: %v", hook)
	}
	hookPath := "/api/v1/admin/webhooks/" + hook["webhook"].(map[string]any)["subscriptionId"].(string)
	c.call("POST", "/api/v1/admin/webhooks", adminKey, map[string]any{"url": "ftp://example.com/hook"}, http.StatusBadRequest, true)
	c.call("GET", "/api/v1/admin/webhooks", adminKey, nil, http.StatusOK, true)
	c.call("GET", "/api/v1/admin/webhooks", callerKey, nil, http.StatusForbidden, true)
	c.call("GET", hookPath, adminKey, nil, http.StatusOK, true)
	c.call("GET", "/api/v1/admin/webhooks/not-an-id", adminKey, nil, http.StatusBadRequest, true)
	if paused := c.call("POST", hookPath+"/pause", adminKey, map[string]any{}, http.StatusOK, true); paused["state"] != "paused" {
		t.Fatalf("a paused subscription: %v", paused)
	}
	c.call("POST", hookPath+"/pause", callerKey, map[string]any{}, http.StatusForbidden, true)
	c.call("POST", hookPath+"/resume", adminKey, map[string]any{}, http.StatusOK, true)
	c.call("POST", "/api/v1/admin/webhooks/00000000-0000-7000-8000-000000000000/resume", adminKey, map[string]any{}, http.StatusNotFound, true)
	c.call("POST", hookPath+"/replay", adminKey, map[string]any{"cursor": "0"}, http.StatusOK, true)
	c.call("POST", hookPath+"/replay", adminKey, map[string]any{"cursor": "-1"}, http.StatusBadRequest, true)
	c.call("DELETE", hookPath, adminKey, nil, http.StatusOK, true)
	c.call("DELETE", hookPath, adminKey, nil, http.StatusNotFound, true)

	// Funding marks.
	fundingPath := "/api/v1/admin/signers/" + devAddress(t, 2) + "/funding"
	c.call("PUT", fundingPath, adminKey, map[string]any{"lowWater": "1000", "highWater": "2000", "treasury": signer}, http.StatusOK, true)
	c.call("PUT", fundingPath, adminKey, map[string]any{"lowWater": "2000", "highWater": "1000"}, http.StatusBadRequest, true)
	c.call("GET", fundingPath, adminKey, nil, http.StatusOK, true)
	c.call("GET", fundingPath, callerKey, nil, http.StatusForbidden, true)
	c.call("DELETE", fundingPath, adminKey, nil, http.StatusOK, true)
	c.call("DELETE", fundingPath, adminKey, nil, http.StatusNotFound, true)

	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			op := operationKey(method, path)
			if !c.success[op] || !c.failure[op] {
				t.Errorf("%s: success answer validated %v, error answer validated %v; want both", op, c.success[op], c.failure[op])
			}
		}
	}
}
