package e2e

import (
	"strings"
	"testing"
)

func TestScanLog(t *testing.T) {
	t.Parallel()
	log := strings.Join([]string{
		`{"ts":"t","level":"INFO","msg":"database migrated"}`,
		`{"ts":"t","level":"WARN","msg":"broadcast failed","error":"connection refused"}`,
		``,
		`txmanager-service dev is up (node n1)`,
		`{"ts":"t","level":"ERROR","msg":"lease lost"}`,
		`{"ts":"t","level":"WARN","msg":"broadcast failed","error":"timeout"}`,
		`{not json`,
	}, "\n")
	got, err := ScanLog(strings.NewReader(log))
	if err != nil {
		t.Fatal(err)
	}
	wantLevels := map[string]int{"INFO": 1, "WARN": 2, "ERROR": 1}
	for level, n := range wantLevels {
		if got.Levels[level] != n {
			t.Errorf("Levels[%s] = %d, want %d", level, got.Levels[level], n)
		}
	}
	if got.Other != 2 {
		t.Errorf("Other = %d, want 2 (banner and broken line)", got.Other)
	}
	wantProblems := []LogProblem{
		{Level: "WARN", Msg: "broadcast failed", Count: 2, Example: "connection refused"},
		{Level: "ERROR", Msg: "lease lost", Count: 1},
	}
	if len(got.Problems) != len(wantProblems) {
		t.Fatalf("Problems = %+v, want %+v", got.Problems, wantProblems)
	}
	for i, want := range wantProblems {
		if got.Problems[i] != want {
			t.Errorf("Problems[%d] = %+v, want %+v", i, got.Problems[i], want)
		}
	}
}
