package services_test

import (
	"testing"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// What waits for approvers (or, approved, for its nonce) is scraped as a count and the
// oldest one's age; approvals that ended are not counted.
func TestApprovalGauges(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	metrics, reader := testsupport.RecordedMetrics(t)
	if _, err := services.NewApprovalDesk(testsupport.TxManager(t, pool), repositories.NewApprovalRepository(pool), testsupport.AuditTrail(t, pool, "n"), "n", metrics, testLogger()); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), `INSERT INTO tx_approval (approval_id, chain_id, signer, fingerprint, requester, policy_scope, policy_version, reason, role, required, state, created_at, expires_at)
		VALUES (gen_random_uuid(), 1, '0x0000000000000000000000000000000000000001', '\x00', 'payouts', 'signer x', 1, 'above', 'approver', 2, 'AWAITING_APPROVAL', now() - interval '2 hours', now() + interval '1 hour'),
		       (gen_random_uuid(), 1, '0x0000000000000000000000000000000000000001', '\x00', 'payouts', 'signer x', 1, 'above', 'approver', 2, 'APPROVED', now(), now() + interval '1 hour'),
		       (gen_random_uuid(), 1, '0x0000000000000000000000000000000000000001', '\x00', 'payouts', 'signer x', 1, 'above', 'approver', 2, 'EXPIRED', now() - interval '3 days', now() - interval '2 days')`); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if g, ok := m.Data.(metricdata.Gauge[float64]); ok && len(g.DataPoints) == 1 {
				got[m.Name] = g.DataPoints[0].Value
			}
		}
	}
	if got[telemetry.ApprovalsPending] != 2 {
		t.Errorf("%s = %v, want 2 (one waiting for votes, one approved)", telemetry.ApprovalsPending, got[telemetry.ApprovalsPending])
	}
	if oldest := got[telemetry.ApprovalsOldestPending]; oldest < 7190 || oldest > 7300 {
		t.Errorf("%s = %v, want about 7200 (two hours)", telemetry.ApprovalsOldestPending, oldest)
	}
}
