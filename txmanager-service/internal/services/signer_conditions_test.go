package services_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ethereum/go-ethereum/common"

	"github.com/bionicotaku/txmanager-service/internal/repositories"
	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

// What holds a signer's creates back, and whether its recovery ends that without a person.
func TestSignerConditionCanServeAndRecovering(t *testing.T) {
	t.Parallel()
	since := time.Now()
	tests := []struct {
		name                 string
		c                    services.SignerCondition
		recoverByIntent      bool
		canServe, recovering bool
	}{
		{name: "healthy", c: services.SignerCondition{}, canServe: true},
		{name: "its key source fails", c: services.SignerCondition{SigningFailingSince: &since}},
		{name: "quarantined, held for an operator", c: services.SignerCondition{Quarantined: true}},
		{name: "quarantined, an operator released it", c: services.SignerCondition{Quarantined: true, ReleaseRequested: true}, recovering: true},
		{name: "quarantined in adopt-by-intent mode", c: services.SignerCondition{Quarantined: true}, recoverByIntent: true, recovering: true},
		{name: "adopt-by-intent, not quarantined", c: services.SignerCondition{}, recoverByIntent: true, canServe: true},
	}
	for _, tc := range tests {
		if got := tc.c.CanServe(); got != tc.canServe {
			t.Errorf("%s: CanServe %t, want %t", tc.name, got, tc.canServe)
		}
		if got := tc.c.Recovering(tc.recoverByIntent); got != tc.recovering {
			t.Errorf("%s: Recovering %t, want %t", tc.name, got, tc.recovering)
		}
	}
}

// Every node reads every signer's condition from the database, whoever holds its lease:
// the readiness detail counts those that cannot serve and why, and one read serves the
// probes and scrapes of a second.
func TestSignerConditionsReportEverySignerFromTheDatabase(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	node := testsupport.NewWriterNode(t, pool, "node-a", testsupport.WriterNodeOptions{})
	healthy, quarantined, failing := testsupport.SignerAddress(50), testsupport.SignerAddress(51), testsupport.SignerAddress(52)
	if err := repositories.NewRosterRepository(pool).RegisterConfigSigners(t.Context(), "node-a", []common.Address{healthy, quarantined, failing}); err != nil {
		t.Fatal(err)
	}
	signing := repositories.NewSigningRepository(pool, testsupport.TestChain())
	conditions, err := services.NewSignerConditions(services.SignerConditionsConfig{}, signing, telemetry.Noop())
	if err != nil {
		t.Fatal(err)
	}
	summary, err := conditions.Summary(t.Context())
	if err != nil || summary != "" {
		t.Fatalf("every signer healthy: summary %q (%v), want none", summary, err)
	}

	// Another reader, so the first one's copy does not answer for what follows.
	conditions, err = services.NewSignerConditions(services.SignerConditionsConfig{}, signing, telemetry.Noop())
	if err != nil {
		t.Fatal(err)
	}
	qLease, err := node.Leases.Acquire(t.Context(), quarantined.Hex())
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := repositories.NewReconcileRepository(pool, testsupport.TestChain()).Quarantine(t.Context(), qLease, 0, 4); err != nil || !ok {
		t.Fatalf("quarantine: %t, %v", ok, err)
	}
	fLease, err := node.Leases.Acquire(t.Context(), failing.Hex())
	if err != nil {
		t.Fatal(err)
	}
	health := services.NewSigningHealth(services.SigningStallConfig{MaxUnsigned: 10}, signing, services.SystemClock{}, testLogger())
	health.Failed(t.Context(), fLease, errors.New("kms: key disabled"))

	summary, err = conditions.Summary(t.Context())
	if want := "2 of 3 signers cannot serve: 1 quarantined, 1 with a key source that fails to sign"; err != nil || summary != want {
		t.Fatalf("summary %q (%v), want %q", summary, err, want)
	}
	listed, err := conditions.List(t.Context())
	if err != nil || len(listed) != 3 {
		t.Fatalf("listed %+v (%v), want the three roster signers", listed, err)
	}
	bySigner := map[string]services.SignerCondition{}
	for _, c := range listed {
		bySigner[c.Signer] = c
	}
	if c := bySigner[quarantined.Hex()]; !c.Quarantined || c.UnrecordedNonces != 4 {
		t.Errorf("quarantined signer: %+v, want 4 unrecorded nonces", c)
	}
	if c := bySigner[failing.Hex()]; c.SigningFailingSince == nil || c.SigningError != "kms: key disabled" {
		t.Errorf("failing signer: %+v, want its key source's error", c)
	}
	if c := bySigner[healthy.Hex()]; !c.CanServe() {
		t.Errorf("healthy signer: %+v, want it serving", c)
	}

	// Within a second the copy answers: a change in the database is not read yet.
	health.Signed(t.Context(), fLease)
	if summary, _ := conditions.Summary(t.Context()); summary == "" {
		t.Fatal("the copy was read again within a second")
	}
}
