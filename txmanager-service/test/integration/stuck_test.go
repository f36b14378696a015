package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/conf"
)

type auditRow struct {
	action, node, reason string
	token                int64
}

func (s *testService) audits(t *testing.T, txID string) []auditRow {
	t.Helper()
	rows, err := s.pool.Query(t.Context(), "SELECT action, node_id, fencing_token, reason FROM stuck_resolution_audit WHERE tx_id = $1 ORDER BY id", txID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []auditRow
	for rows.Next() {
		var a auditRow
		if err := rows.Scan(&a.action, &a.node, &a.token, &a.reason); err != nil {
			t.Fatal(err)
		}
		out = append(out, a)
	}
	return out
}

// A head-of-line nonce that can never be mined (fee cap far below the base fee) holds up
// the signer's later transactions. With NOOP it is marked STUCK and audited, and nothing
// moves; an operator's CANCEL (admin API), or CANCEL configured as the policy, fills the
// nonce and the later transactions confirm. On go-ethereum and on anvil alike.
func TestStuckHeadOfLine(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		action string
	}{
		{"noop, then an operator cancels", "noop"},
		{"cancel configured", "cancel"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			onEveryNode(t, 200*time.Millisecond, func(t *testing.T, sim devChain) {
				s := startService(t, serviceOptions{chain: sim, fastPipeline: true, configure: func(bc *conf.Bootstrap) {
					bc.Resubmit.Interval = conf.Duration(300 * time.Millisecond)
					bc.Stuck.MinAge = conf.Duration(time.Second)
					bc.Stuck.MinAttempts = 2
					bc.Stuck.Action = tc.action
				}})
				signer, to := sim.DevAddresses()[0].Hex(), sim.DevAddresses()[7].Hex()
				head := s.createOK(t, map[string]any{"signer": signer, "to": to, "value": "1", "gasLimit": 21000, "maxFeePerGas": "1", "maxPriorityFeePerGas": "1"})
				var behind []string
				for v := range 3 {
					behind = append(behind, s.createOK(t, map[string]any{"signer": signer, "to": to, "value": fmt.Sprint(10 + v), "gasLimit": 21000}))
				}

				if tc.action == "noop" {
					waitFor(t, 30*time.Second, "head of line marked STUCK", func() bool { return s.tx(t, head).state == "STUCK" })
					audits := s.audits(t, head)
					if len(audits) != 1 || audits[0].action != "NOOP" || audits[0].token != 1 || audits[0].node == "" || audits[0].reason == "" {
						t.Fatalf("audit = %+v, want one NOOP entry with node, token 1 and a reason", audits)
					}
					// The event is recorded after the state, in a statement of its own.
					waitFor(t, 10*time.Second, "one tx.stuck event for the head of line (webhook subscribers hear of it)", func() bool {
						return s.count(t, `SELECT count(*) FROM service_event WHERE kind = 'tx.stuck' AND payload->>'txId' = $1`, head) == 1
					})
					time.Sleep(time.Second) // a second event would have been recorded by now
					if n := s.count(t, `SELECT count(*) FROM service_event WHERE kind = 'tx.stuck' AND payload->>'txId' = $1`, head); n != 1 {
						t.Fatalf("%d tx.stuck events for the head of line, want 1", n)
					}
					time.Sleep(2 * time.Second) // nothing behind it can move while it blocks the nonce
					for _, id := range behind {
						if r := s.tx(t, id); r.state != "TRACKING" {
							t.Fatalf("tx behind the stuck nonce is %s, want TRACKING", r.state)
						}
					}
					if got := s.do(t, http.MethodGet, "/api/v1/tx/"+head, nil); got.body["state"] != "STUCK" {
						t.Fatalf("query shows %s", got.raw)
					}
					s.checkAdminViewOfStuckSigner(t, signer, head)
					resolved := s.do(t, http.MethodPost, "/api/v1/admin/tx/"+head+"/resolve", []byte(`{"action":"cancel","reason":"ops ticket 7"}`))
					if resolved.status != http.StatusOK || resolved.body["action"] != "CANCEL" {
						t.Fatalf("admin resolve: %d %s", resolved.status, resolved.raw)
					}
					bad := s.do(t, http.MethodPost, "/api/v1/admin/tx/"+head+"/resolve", []byte(`{"action":"explode"}`))
					if bad.status != http.StatusBadRequest || bad.reason() != "INVALID_ARGUMENT" {
						t.Fatalf("unknown action: %d %s", bad.status, bad.raw)
					}
				}

				// The pipeline's progress: every row's state and attempts so far.
				progress := func() string {
					var fingerprint string
					_ = s.pool.QueryRow(t.Context(), `SELECT coalesce(string_agg(state || '/' || coalesce(sub_state, '') || '/' || submit_attempts || '/' || coalesce(block_number::text, ''), ',' ORDER BY nonce), '')
					|| ' attempts ' || (SELECT count(*) FROM tx_attempt) FROM managed_tx`).Scan(&fingerprint)
					return fingerprint
				}
				waitForProgress(t, 45*time.Second, 2*time.Minute, "the stuck nonce cancelled", progress, func() bool { return s.tx(t, head).state == "FAILED_FINAL" })
				if r := s.tx(t, head); r.subState != "CANCELLED" {
					t.Fatalf("head of line ended %s/%s, want FAILED_FINAL/CANCELLED", r.state, r.subState)
				}
				waitForProgress(t, 45*time.Second, 2*time.Minute, "the transactions behind it confirmed", progress, func() bool {
					for _, id := range behind {
						if s.tx(t, id).state != "CONFIRMED" {
							return false
						}
					}
					return true
				})
				audits := s.audits(t, head)
				last := audits[len(audits)-1]
				if last.action != "CANCEL" || last.token != 1 {
					t.Fatalf("audit = %+v, want a CANCEL entry last", audits)
				}
				if tc.action == "noop" && last.reason != "ops ticket 7" {
					t.Fatalf("operator's reason not audited: %+v", last)
				}
				var kinds []string
				rows, _ := s.pool.Query(t.Context(), "SELECT kind FROM tx_attempt WHERE tx_id = $1 ORDER BY created_at", head)
				for rows.Next() {
					var k string
					_ = rows.Scan(&k)
					kinds = append(kinds, k)
				}
				if b, _ := json.Marshal(kinds); string(b) != `["ORIGINAL","CANCEL"]` {
					t.Fatalf("attempts = %s, want the original then one cancel", b)
				}
			})
		})
	}
}

// checkAdminViewOfStuckSigner checks what an operator sees of a signer whose head of line
// (the first of its four transactions) is STUCK: its status, the stuck list and the node
// holding its lease.
func (s *testService) checkAdminViewOfStuckSigner(t *testing.T, signer, head string) {
	t.Helper()
	status := s.do(t, http.MethodGet, "/api/v1/admin/signers/"+signer, nil)
	if status.status != http.StatusOK {
		t.Fatalf("signer status: %d %s", status.status, status.raw)
	}
	for field, want := range map[string]any{
		"signer": signer, "fencingToken": "1", "leaseLive": true, "nextNonce": "4", "pendingDepth": "4", "stuckCount": "1",
	} {
		if got := status.body[field]; got != want {
			t.Errorf("signer status %s = %v, want %v (%s)", field, got, want, status.raw)
		}
	}
	if age, _ := status.body["oldestPendingAgeSeconds"].(float64); age < 1 {
		t.Errorf("oldest pending age = %v s, want at least the 1 s it took to be judged stuck", status.body["oldestPendingAgeSeconds"])
	}
	owner, _ := status.body["leaseOwner"].(string)

	stuck := s.do(t, http.MethodGet, "/api/v1/admin/stuck?signer="+signer, nil)
	txs, _ := stuck.body["txs"].([]any)
	if stuck.status != http.StatusOK || len(txs) != 1 || txs[0].(map[string]any)["txId"] != head {
		t.Errorf("stuck list = %d %s, want exactly the head of line %s", stuck.status, stuck.raw, head)
	}

	nodes := s.do(t, http.MethodGet, "/api/v1/admin/nodes", nil)
	listed, _ := nodes.body["nodes"].([]any)
	found := false
	for _, n := range listed {
		node := n.(map[string]any)
		if node["nodeId"] == s.nodeID && owner == s.nodeID+"#"+fmt.Sprint(node["incarnation"]) {
			found = node["alive"] == true && node["leases"] == "1" && node["grpcAddr"] == s.grpcAddr
		}
	}
	if nodes.status != http.StatusOK || !found {
		t.Errorf("node list = %d %s, want the lease owner %q alive with 1 lease at %s", nodes.status, nodes.raw, owner, s.grpcAddr)
	}
}
