package workers

import (
	"testing"
	"time"
)

// A failure that repeats every pass is logged once a minute with how often it was held
// back; another failure, another signer, or a failure after a pass that succeeded is
// logged at once.
func TestRepeatedWarningsAreLoggedOnceAMinute(t *testing.T) {
	start := time.Unix(1_700_000_000, 0)
	type step struct {
		key, text string
		after     time.Duration
		passed    bool // the key's pass succeeded at this step (nothing logged)
		wantLog   bool
		wantHeld  int
	}
	steps := []step{
		{key: "submit a", text: "kms: disabled", wantLog: true},
		{key: "submit a", text: "kms: disabled", after: time.Second},
		{key: "submit a", text: "kms: disabled", after: 2 * time.Second},
		{key: "submit b", text: "kms: disabled", after: 2 * time.Second, wantLog: true},
		{key: "submit a", text: "kms: timeout", after: 3 * time.Second, wantLog: true},
		{key: "submit a", text: "kms: timeout", after: 4 * time.Second},
		// AWS names each call: the same failure with another request id is the same.
		{key: "submit c", text: "kms: DisabledException, RequestID: 7c9e6679-7425-40de-944b-e07fc1f90ae7, key disabled", after: 4 * time.Second, wantLog: true},
		{key: "submit c", text: "kms: DisabledException, RequestID: 16fd2706-8baf-433b-82eb-8c7fada847da, key disabled", after: 5 * time.Second},
		{key: "submit c", text: "kms: api error, request id: 3a1f, key disabled", after: 5 * time.Second, wantLog: true},
		{key: "submit a", text: "kms: timeout", after: 64 * time.Second, wantLog: true, wantHeld: 1},
		{key: "submit a", after: 65 * time.Second, passed: true},
		{key: "submit a", text: "kms: timeout", after: 66 * time.Second, wantLog: true},
	}
	var r repeatedWarnings
	for i, s := range steps {
		if s.passed {
			r.passed(s.key)
			continue
		}
		logged, held := r.allow(s.key, s.text, start.Add(s.after))
		if logged != s.wantLog || held != s.wantHeld {
			t.Fatalf("step %d (%s %q at +%s): logged %v with %d held back, want %v with %d", i, s.key, s.text, s.after, logged, held, s.wantLog, s.wantHeld)
		}
	}
}
