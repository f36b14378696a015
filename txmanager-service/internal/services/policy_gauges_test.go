package services_test

import (
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// Every window of every policy is scraped with what it counts and its limit, per part.
func TestPolicyWindowGauges(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	metrics, reader := testsupport.RecordedMetrics(t)
	book, err := services.NewPolicyBook(testsupport.TxManager(t, pool), repositories.NewPolicyRepository(pool), testsupport.AuditTrail(t, pool, "n"), services.KnownRoles{"approver"}, metrics, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := book.Set(t.Context(), "credential", "payouts", []byte(`{"windows":[{"period":"1h","maxValue":"1000","maxFee":"50"},{"period":"24h","maxValue":"5000"}]}`), "ops"); err != nil {
		t.Fatal(err)
	}
	// Admitted this minute and 3 hours ago, on two chains: the hour counts the first, the day
	// both (the gauges show every chain's together).
	if _, err := pool.Exec(t.Context(), `INSERT INTO policy_spend (scope_kind, scope, chain_id, minute, value_wei, fee_wei) VALUES
		('credential', 'payouts', 1337, date_trunc('minute', now()), 300, 20), ('credential', 'payouts', 137, date_trunc('minute', now()) - interval '3 hours', 400, 10)`); err != nil {
		t.Fatal(err)
	}
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if g, ok := m.Data.(metricdata.Gauge[float64]); ok && (m.Name == telemetry.PolicyWindowUsedWei || m.Name == telemetry.PolicyWindowLimitWei) {
				for _, dp := range g.DataPoints {
					period, _ := dp.Attributes.Value(attribute.Key("period"))
					part, _ := dp.Attributes.Value(attribute.Key("part"))
					got[m.Name+" "+period.AsString()+" "+part.AsString()] = dp.Value
				}
			}
		}
	}
	want := map[string]float64{
		"policy_window_used_wei 1h0m0s value": 300, "policy_window_limit_wei 1h0m0s value": 1000,
		"policy_window_used_wei 1h0m0s fee": 20, "policy_window_limit_wei 1h0m0s fee": 50,
		"policy_window_used_wei 24h0m0s value": 700, "policy_window_limit_wei 24h0m0s value": 5000,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("scraped %v, want exactly %v (the day window has no fee limit)", got, want)
	}
}
