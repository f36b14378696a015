package integration

import (
	"encoding/json"
	"fmt"
	"math/big"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/bionicotaku/txmanager-service/internal/conf"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// Issue 48: a daily limit of a credential's policy holds on a 3-node cluster. 200 concurrent
// creates with the credential, from 3 signers (whose leases three nodes share out), each sent
// to a node picked at random (forward routing): the value (or worst-case fee) admitted never
// exceeds the window's limit by one wei, every create answered is either admitted (202) or
// refused with 403 POLICY_DENIED naming the window, and no create was refused that would
// have fitted (each refused one still does not fit beside all that was admitted).
func TestDailyLimitsHoldOnAThreeNodeCluster(t *testing.T) {
	t.Parallel()
	const key = "payouts-key"
	for _, tc := range []struct {
		name, limitField, rule, column string
		// value and maxFeePerGas of create i; amount is what the window counts of it.
		value, feeCap func(r *rand.Rand) int64
		amount        func(value, feeCap int64) int64
	}{
		{"value", "maxValue", "windowValue", "value_wei", func(r *rand.Rand) int64 { return 1 + r.Int64N(1_000_000) }, func(*rand.Rand) int64 { return 0 }, func(v, _ int64) int64 { return v }},
		{"fee", "maxFee", "windowFee", "fee_wei", func(*rand.Rand) int64 { return 1 }, func(r *rand.Rand) int64 { return 1_000_000_000 + r.Int64N(1_000_000_000) }, func(_, f int64) int64 { return 21000 * f }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sim := newTestChain(t, 250*time.Millisecond)
			dsn := testsupport.MigratedDSN(t)
			nodes := make([]*testService, 3)
			for i := range nodes {
				nodes[i] = startService(t, serviceOptions{chain: sim, signers: 3, fastPipeline: true, dsn: dsn, configure: func(bc *conf.Bootstrap) {
					bc.Routing.Mode = conf.RoutingForward
					bc.Lease.Duration, bc.Lease.RenewInterval = conf.Duration(3*time.Second), conf.Duration(time.Second)
					bc.Routing.HeartbeatInterval, bc.Routing.NodeTimeout = conf.Duration(500*time.Millisecond), conf.Duration(2*time.Second)
					bc.Auth = conf.Auth{Enabled: true, APIKeys: []conf.APIKey{{ID: "payouts", SHA256: sha256Hex(key), Signers: []string{"*"}, Admin: true}}}
				}})
			}
			signers := []string{devAddress(t, 0), devAddress(t, 1), devAddress(t, 2)}
			// Spread the leases: each node first serves one signer.
			for i, node := range nodes {
				body, _ := json.Marshal(map[string]any{"signer": signers[i], "to": devAddress(t, 7), "value": "0", "gasLimit": 21000, "maxFeePerGas": "1"})
				if a := node.doAs(t, http.MethodPost, "/api/v1/tx", body, "X-API-Key", key); a.status != http.StatusAccepted {
					t.Fatalf("warm-up create on node %d: %d %s", i, a.status, a.raw)
				}
			}

			r := rand.New(rand.NewPCG(48, 200))
			const creates = 200
			values, feeCaps := make([]int64, creates), make([]int64, creates)
			var sum int64
			for i := range creates {
				values[i], feeCaps[i] = tc.value(r), tc.feeCap(r)
				sum += tc.amount(values[i], feeCaps[i])
			}
			limit := sum / 2
			policy, _ := json.Marshal(map[string]any{"policy": map[string]any{"windows": []any{map[string]any{"period": "24h", tc.limitField: fmt.Sprint(limit)}}}})
			if a := nodes[0].doAs(t, http.MethodPut, "/api/v1/admin/policies/credential/payouts", policy, "X-API-Key", key); a.status != http.StatusOK {
				t.Fatalf("set the policy: %d %s", a.status, a.raw)
			}

			type answer struct {
				status int
				reason string
				rule   string
			}
			answers := make([]answer, creates)
			var wg sync.WaitGroup
			for w := range 20 {
				wg.Go(func() {
					pick := rand.New(rand.NewPCG(uint64(w), 7))
					for i := w; i < creates; i += 20 {
						body, _ := json.Marshal(map[string]any{"signer": signers[pick.IntN(3)], "to": devAddress(t, 7), "value": fmt.Sprint(values[i]),
							"gasLimit": 21000, "maxFeePerGas": fmt.Sprint(feeCaps[i]), "requestId": fmt.Sprintf("%s-%d", tc.name, i)})
						a := nodes[pick.IntN(3)].doAs(t, http.MethodPost, "/api/v1/tx", body, "X-API-Key", key)
						md, _ := a.body["metadata"].(map[string]any)
						rule, _ := md["rule"].(string)
						answers[i] = answer{a.status, a.reason(), rule}
					}
				})
			}
			wg.Wait()

			var admitted int64
			var refused []int
			for i, a := range answers {
				switch {
				case a.status == http.StatusAccepted:
					admitted += tc.amount(values[i], feeCaps[i])
				case a.status == http.StatusForbidden && a.reason == "POLICY_DENIED" && a.rule == tc.rule:
					refused = append(refused, i)
				default:
					t.Fatalf("create %d: %d %s (rule %q), want 202 or 403 POLICY_DENIED by the window", i, a.status, a.reason, a.rule)
				}
			}
			if admitted > limit {
				t.Fatalf("admitted %d wei under a daily limit of %d: %d over", admitted, limit, admitted-limit)
			}
			if len(refused) == 0 {
				t.Fatalf("nothing refused: the creates (%d wei) did not straddle the limit %d", sum, limit)
			}
			for _, i := range refused {
				if amount := tc.amount(values[i], feeCaps[i]); admitted+amount <= limit {
					t.Errorf("create %d (%d wei) was refused though it fits: %d of %d admitted", i, amount, admitted, limit)
				}
			}
			written := nodes[0].count(t, `SELECT count(*) FROM managed_tx WHERE request_id LIKE $1`, tc.name+"-%")
			if written != int64(creates-len(refused)) {
				t.Errorf("%d transactions written, want the %d admitted", written, creates-len(refused))
			}
			var counted string
			if err := nodes[0].pool.QueryRow(t.Context(), `SELECT sum(`+tc.column+`)::text FROM policy_spend WHERE scope = 'payouts'`).Scan(&counted); err != nil {
				t.Fatal(err)
			}
			if want := new(big.Int).SetInt64(admitted).String(); counted != want {
				t.Errorf("the window's buckets count %s wei, the answers admitted %s", counted, want)
			}
			t.Logf("%s: 200 creates on 3 nodes (random routing), daily limit %d wei: admitted %d wei in %d creates, refused %d, %d wei of headroom left",
				tc.name, limit, admitted, written, len(refused), limit-admitted)
		})
	}
}
