package integration

import (
	"context"
	"encoding/json"
	"math/big"
	"net/http"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// A database restored from a backup taken after an intent was approved and before it was
// admitted shows the approval approved again, while the chain holds the transaction its
// admission sent. The admission after the restore adopts that transaction, recovered from
// the chain, instead of paying a second time: the approval is admitted as it, and reading
// the approval's id answers with it. So with a request id or without one (the approval
// names what it repeats), and when the payout spent most of the signer's balance, so that
// the admission's funds check refuses a second one.
func TestAnApprovalAdmittedBeforeARestoreAdoptsItsTransactionOnChain(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		requestID string
		// payout is the approved value, given the signer's balance.
		payout func(balance *big.Int) *big.Int
	}{
		{name: "with a request id", requestID: "payout-118", payout: func(*big.Int) *big.Int { return big.NewInt(5000) }},
		{name: "without a request id", payout: func(*big.Int) *big.Int { return big.NewInt(5000) }},
		{name: "most of the balance", requestID: "payout-119", payout: func(balance *big.Int) *big.Int {
			return new(big.Int).Div(new(big.Int).Mul(balance, big.NewInt(3)), big.NewInt(4))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			approvalAdmittedBeforeARestore(t, tc.requestID, tc.payout)
		})
	}
}

func approvalAdmittedBeforeARestore(t *testing.T, requestID string, payoutOf func(*big.Int) *big.Int) {
	ctx := context.Background()
	keys := map[string]string{"payouts": "restore-payouts-key", "alice": "restore-alice-key", "ops": "restore-ops-key"}
	sim := newTestChain(t, 250*time.Millisecond)
	dsn := testsupport.MigratedDSN(t)
	opts := serviceOptions{chain: sim, signers: 1, fastPipeline: true, dsn: dsn, chainQuery: true, configure: func(bc *conf.Bootstrap) {
		bc.Nonce.NonceStateTimeout = 0 // every batch asks the chain
		bc.Create.ApprovalInterval = conf.Duration(200 * time.Millisecond)
		bc.Auth = conf.Auth{Enabled: true, Roles: []string{"approver"}, APIKeys: []conf.APIKey{
			{ID: "payouts", SHA256: sha256Hex(keys["payouts"]), Signers: []string{"*"}},
			{ID: "alice", SHA256: sha256Hex(keys["alice"]), Signers: []string{"*"}, Roles: []string{"approver"}},
			{ID: "ops", SHA256: sha256Hex(keys["ops"]), Signers: []string{"*"}, Admin: true},
		}}
	}}
	call := func(s *testService, who, method, path string, body any) apiResponse {
		t.Helper()
		var raw []byte
		if body != nil {
			raw, _ = json.Marshal(body)
		}
		return s.doAs(t, method, path, raw, "X-API-Key", keys[who])
	}
	signer, to := devAddress(t, 0), devAddress(t, 6)
	client := ethClient(t, sim)
	balance, err := client.BalanceAt(ctx, common.HexToAddress(signer), nil)
	if err != nil {
		t.Fatal(err)
	}
	payout := payoutOf(balance).String()
	create := func(s *testService, requestID, value string) apiResponse {
		body := map[string]any{"signer": signer, "to": to, "value": value, "gasLimit": 21000}
		if requestID != "" {
			body["requestId"] = requestID
		}
		return call(s, "payouts", http.MethodPost, "/api/v1/tx", body)
	}

	first := startService(t, opts)
	policy := map[string]any{"policy": map[string]any{"approval": map[string]any{"aboveValue": "1000", "approvers": 1, "expiresAfter": "1h"}}}
	if a := call(first, "ops", http.MethodPut, "/api/v1/admin/policies/signer/"+signer, policy); a.status != http.StatusOK {
		t.Fatalf("set the approval policy: %d %s", a.status, a.raw)
	}
	// Nonce 0, below the threshold: it stays on record through the restore.
	kept := create(first, "kept", "1")
	if kept.status != http.StatusAccepted {
		t.Fatalf("create below the threshold: %d %s", kept.status, kept.raw)
	}
	keptID := kept.tx()["txId"].(string)
	waitFor(t, 60*time.Second, "the first transfer confirmed", func() bool { return first.tx(t, keptID).state == "CONFIRMED" })
	waiting := create(first, requestID, payout)
	if waiting.status != http.StatusAccepted || waiting.tx()["state"] != "AWAITING_APPROVAL" {
		t.Fatalf("a create above the threshold: %d %s, want 202 AWAITING_APPROVAL", waiting.status, waiting.raw)
	}
	approvalID := waiting.tx()["txId"].(string)
	if a := call(first, "alice", http.MethodPost, "/api/v1/approvals/"+approvalID+"/approve", map[string]any{"note": "checked"}); a.status != http.StatusOK {
		t.Fatalf("approve: %d %s", a.status, a.raw)
	}
	waitFor(t, 60*time.Second, "the approved payout confirmed", func() bool {
		var n int64
		_ = first.pool.QueryRow(ctx, "SELECT count(*) FROM managed_tx WHERE tx_id = $1 AND state = 'CONFIRMED'", approvalID).Scan(&n)
		return n == 1
	})
	paid := first.tx(t, approvalID).txHash
	first.stop(t)

	// The backup was taken after the approval, before its admission: the transaction at
	// nonce 1 and everything about it is gone, and the approval is approved again.
	loseFromNonceOne(t, first, "UPDATE tx_approval SET state = 'APPROVED'")

	second := startService(t, opts)
	var approval apiResponse
	waitFor(t, 90*time.Second, "the approval admitted again", func() bool {
		approval = call(second, "ops", http.MethodGet, "/api/v1/approvals/"+approvalID, nil)
		return approval.status == http.StatusOK && approval.body["state"] == "ADMITTED"
	})
	read := call(second, "payouts", http.MethodGet, "/api/v1/tx/"+approvalID, nil)
	if gotRequestID, _ := read.body["requestId"].(string); read.status != http.StatusOK || read.body["txHash"] != paid || read.body["recovered"] != true || gotRequestID != requestID {
		t.Fatalf("the admitted approval's transaction: %d %s, want the payout on chain %s, recovered, under request id %q", read.status, read.raw, paid, requestID)
	}
	if requestID != "" {
		if replay := create(second, requestID, payout); replay.status != http.StatusOK || replay.tx()["txHash"] != paid {
			t.Fatalf("the payout's retry: %d %s, want 200 with the payout on chain %s", replay.status, replay.raw, paid)
		}
	}
	// A later create goes at nonce 2: the admission took none.
	next := create(second, "after", "2")
	if next.status != http.StatusAccepted || next.tx()["nonce"] != "2" {
		t.Fatalf("a create after the admission: %d %s, want 202 at nonce 2", next.status, next.raw)
	}
	nextID := next.tx()["txId"].(string)
	waitFor(t, 60*time.Second, "the later transfer confirmed", func() bool { return second.tx(t, nextID).state == "CONFIRMED" })

	if paidTimes := transfersOnChain(t, sim, signer, to)[payout]; paidTimes != 1 {
		t.Fatalf("the approved payout was executed %d times on chain, want once", paidTimes)
	}
}
