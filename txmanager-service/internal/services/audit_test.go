package services_test

import (
	"testing"

	"github.com/bionicotaku/txmanager-service/internal/services"
	"github.com/bionicotaku/txmanager-service/test/testsupport"
)

func servicesAuditAll() services.AuditFilter { return services.AuditFilter{} }

// The audit trail's chain holds on an untouched trail and names the first record that
// breaks it once one is edited, deleted, or cut off the end in SQL; its own retention keeps
// the chain checkable from where it cut.
func TestAuditTrailDetectsEditedAndDeletedRecords(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		tamper  string // SQL run on the trail of 6 records
		wantBad int64
	}{
		{"untouched", "", 0},
		{"a record's after edited", `UPDATE audit_record SET after = '{"maxValuePerTx":"1000000000000000000000"}' WHERE seq = 3`, 3},
		{"a record's actor edited", `UPDATE audit_record SET actor = 'someone-else' WHERE seq = 5`, 5},
		{"a record deleted", `DELETE FROM audit_record WHERE seq = 2`, 2},
		{"a record re-hashed after an edit", `UPDATE audit_record SET actor = 'x', hash = sha256(hash) WHERE seq = 4`, 4},
		{"the last record deleted", `DELETE FROM audit_record WHERE seq = 6`, 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := testsupport.MigratedPool(t)
			book := testsupport.PolicyBook(t, pool, testsupport.AuditTrail(t, pool, "node-a"))
			for i, doc := range []string{`{"maxValuePerTx":"10"}`, `{"maxValuePerTx":"20"}`, `{"maxValuePerTx":"30"}`, `{"maxFeePerGas":"100"}`, `{"maxValuePerTx":"40"}`, `{"maxValuePerTx":"50"}`} {
				actor := []string{"alice", "bob"}[i%2]
				if _, err := book.Set(t.Context(), "credential", "payouts", []byte(doc), actor); err != nil {
					t.Fatal(err)
				}
			}
			if tc.tamper != "" {
				if _, err := pool.Exec(t.Context(), tc.tamper); err != nil {
					t.Fatal(err)
				}
			}
			trail := testsupport.AuditTrail(t, pool, "node-b")
			v, err := trail.Verify(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantBad == 0 {
				if v.FirstBad != nil || v.Checked != 6 || v.Head.LastSeq != 6 {
					t.Fatalf("untouched trail: %+v, want 6 records checked and no break", v)
				}
				return
			}
			if v.FirstBad == nil || v.FirstBad.Seq != tc.wantBad {
				t.Fatalf("after %q: %+v, want record %d named", tc.tamper, v.FirstBad, tc.wantBad)
			}
			t.Logf("%s: record %d: %s", tc.name, v.FirstBad.Seq, v.FirstBad.Reason)
		})
	}
}

// The trail's retention removes its oldest records and records that it did; the chain is
// still checked from where it cut, and a record removed below the cut is still detected.
func TestAuditRetentionKeepsTheChainCheckable(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	trail := testsupport.AuditTrail(t, pool, "node-a")
	book := testsupport.PolicyBook(t, pool, trail)
	for _, doc := range []string{`{"maxValuePerTx":"10"}`, `{"maxValuePerTx":"20"}`, `{"maxValuePerTx":"30"}`} {
		if _, err := book.Set(t.Context(), "signer", testsupport.SignerAddress(1).Hex(), []byte(doc), "alice"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(t.Context(), `UPDATE audit_record SET at = at - interval '400 days' WHERE seq <= 2`); err != nil {
		t.Fatal(err)
	}
	// The records' times were moved in SQL: their hashes no longer hold, but they are the
	// ones retention removes, so the trail kept verifies.
	pruned, err := trail.Prune(t.Context(), 365*24*60*60*1e9)
	if err != nil || pruned != 2 {
		t.Fatalf("pruned %d (%v), want 2", pruned, err)
	}
	v, err := trail.Verify(t.Context())
	if err != nil || v.FirstBad != nil || v.Head.PrunedThroughSeq != 2 || v.Checked != 2 {
		t.Fatalf("after retention: %+v %v, want records 3 and 4 (the pruning's own) checked from record 2", v, err)
	}
	if _, err := pool.Exec(t.Context(), `DELETE FROM audit_record WHERE seq = 3`); err != nil {
		t.Fatal(err)
	}
	if v, err = trail.Verify(t.Context()); err != nil || v.FirstBad == nil || v.FirstBad.Seq != 3 {
		t.Fatalf("record 3 deleted after retention: %+v %v, want it named", v.FirstBad, err)
	}
}

// Records are numbered in order but stamped by each node's clock: one from a node whose
// clock runs behind looks older than the records before it. Retention prunes only up to the
// first record inside the horizon, never past it.
func TestAuditRetentionStopsAtTheFirstRecordInsideTheHorizon(t *testing.T) {
	t.Parallel()
	pool := testsupport.MigratedPool(t)
	trail := testsupport.AuditTrail(t, pool, "node-a")
	book := testsupport.PolicyBook(t, pool, trail)
	for _, doc := range []string{`{"maxValuePerTx":"10"}`, `{"maxValuePerTx":"20"}`, `{"maxValuePerTx":"30"}`, `{"maxValuePerTx":"40"}`} {
		if _, err := book.Set(t.Context(), "signer", testsupport.SignerAddress(1).Hex(), []byte(doc), "alice"); err != nil {
			t.Fatal(err)
		}
	}
	// Record 1 is old; record 2 is young; record 3 came from a node whose clock is a year
	// behind.
	if _, err := pool.Exec(t.Context(), `UPDATE audit_record SET at = at - interval '400 days' WHERE seq IN (1, 3)`); err != nil {
		t.Fatal(err)
	}
	pruned, err := trail.Prune(t.Context(), 365*24*60*60*1e9)
	if err != nil || pruned != 1 {
		t.Fatalf("pruned %d (%v), want record 1 alone", pruned, err)
	}
	var kept []int64
	rows, err := pool.Query(t.Context(), `SELECT seq FROM audit_record WHERE seq <= 4 ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			t.Fatal(err)
		}
		kept = append(kept, seq)
	}
	if rows.Err() != nil || len(kept) != 3 || kept[0] != 2 {
		t.Fatalf("records kept %v (%v), want 2, 3 and 4", kept, rows.Err())
	}
	// The next pass, with nothing newly past the horizon, prunes nothing and fails nothing.
	if pruned, err := trail.Prune(t.Context(), 365*24*60*60*1e9); err != nil || pruned != 0 {
		t.Fatalf("a second pass pruned %d (%v), want nothing", pruned, err)
	}
}
