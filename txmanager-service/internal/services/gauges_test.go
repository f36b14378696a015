package services_test

import (
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// One scrape of any node shows every signer's condition from the database, the balances
// this node checked, and the age of the oldest transaction of each signer it drives: the
// gauges an operator alerts on, read as Prometheus reads them.
func TestSignerGaugesAreScraped(t *testing.T) {
	t.Parallel()
	prom, cleanup, err := telemetry.NewPrometheus()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cleanup)
	metrics, err := telemetry.NewMetricsFromPrometheus(prom, noop.NewTracerProvider())
	if err != nil {
		t.Fatal(err)
	}
	pool := testsupport.MigratedPool(t)
	node := testsupport.NewWriterNode(t, pool, "node-a", testsupport.WriterNodeOptions{})
	quarantined, driven := testsupport.SignerAddress(90), testsupport.SignerAddress(91)

	if _, err := services.NewSignerConditions(services.SignerConditionsConfig{RecoverByIntent: true}, repositories.NewSigningRepository(pool, testsupport.TestChain()),
		metrics); err != nil {
		t.Fatal(err)
	}
	lease, err := node.Leases.Acquire(t.Context(), quarantined.Hex())
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := repositories.NewReconcileRepository(pool, testsupport.TestChain()).Quarantine(t.Context(), lease, 0, 3); err != nil || !ok {
		t.Fatalf("quarantine: %t, %v", ok, err)
	}

	guard, err := services.NewFundsGuard(services.FundsConfig{Check: true, CacheFor: time.Hour}, &fundsChain{balance: big.NewInt(5_000_000)}, fixedCost{cost: big.NewInt(1_000_000)},
		services.SystemClock{}, metrics)
	if err != nil {
		t.Fatal(err)
	}
	if err := guard.Refresh(t.Context(), []common.Address{driven}); err != nil {
		t.Fatal(err)
	}

	if _, err := services.NewOpenSigners(repositories.NewOpenSignerRepository(pool, testsupport.TestChain()), node.Leases, signerList{}, metrics, testLogger()); err != nil {
		t.Fatal(err)
	}
	if _, errs := testsupport.Results(t, node.Allocate(t, driven, 1)); errors.Join(errs...) != nil {
		t.Fatal(errors.Join(errs...))
	}

	rec := httptest.NewRecorder()
	prom.Handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: %d", rec.Code)
	}
	scraped := rec.Body.String()
	for _, want := range []string{
		`signer_quarantined{signer="` + quarantined.Hex() + `"} 1`,
		`signer_recovering{signer="` + quarantined.Hex() + `"} 1`,
		`signer_recovery_unrecorded_nonces{signer="` + quarantined.Hex() + `"} 3`,
		`signer_balance_wei{signer="` + driven.Hex() + `"} 5e+06`,
		`signer_spendable_wei{signer="` + driven.Hex() + `"} 4e+06`,
		`pending_oldest_age_seconds{signer="` + driven.Hex() + `"}`,
	} {
		if !strings.Contains(scraped, want) {
			t.Errorf("the scrape lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("scraped:\n%s", grepLines(scraped, "signer_", "pending_"))
	}
}

// grepLines keeps the lines of s that start with one of prefixes.
func grepLines(s string, prefixes ...string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				out = append(out, line)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}
