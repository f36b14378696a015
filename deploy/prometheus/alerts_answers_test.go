// Package prometheus_test checks what the alert rules tell an operator against the
// service's own definitions: every answer an alert names is the status the API gives that
// reason.
package prometheus_test

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// errorReasonsProto is where every API error reason and its HTTP status are defined.
const errorReasonsProto = "../../txmanager-service/api/txmanager/v1/error_reason.proto"

type ruleFile struct {
	Groups []struct {
		Rules []struct {
			Alert       string            `json:"alert"`
			Annotations map[string]string `json:"annotations"`
		} `json:"rules"`
	} `json:"groups"`
}

// reasonCodes reads every ErrorReason and its (errors.code) from the proto.
func reasonCodes(t *testing.T) map[string]int {
	t.Helper()
	raw, err := os.ReadFile(errorReasonsProto)
	if err != nil {
		t.Fatal(err)
	}
	declared := regexp.MustCompile(`(?m)^\s*([A-Z][A-Z_]+) = \d+ \[\(errors\.code\) = (\d+)\];`)
	codes := map[string]int{}
	for _, m := range declared.FindAllStringSubmatch(string(raw), -1) {
		code, err := strconv.Atoi(m[2])
		if err != nil {
			t.Fatal(err)
		}
		codes[m[1]] = code
	}
	if codes["SIGNER_QUARANTINED"] != 409 || codes["UNAVAILABLE"] != 503 {
		t.Fatalf("read %d reasons from %s, not the ones every deployment has: %v", len(codes), errorReasonsProto, codes)
	}
	return codes
}

// Every "<status> <REASON>" an alert's text names is a reason the API defines, answered with
// that status: an alert that promises 409 for what answers 503 sends an operator the wrong
// way.
func TestAlertsNameTheAnswersTheAPIGives(t *testing.T) {
	codes := reasonCodes(t)
	raw, err := os.ReadFile("alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var rules ruleFile
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatal(err)
	}
	answer := regexp.MustCompile(`\b([1-5]\d\d) ([A-Z][A-Z_]{3,})\b`)
	named := 0
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			text := strings.Join([]string{r.Annotations["summary"], r.Annotations["description"]}, " ")
			for _, m := range answer.FindAllStringSubmatch(text, -1) {
				named++
				status, _ := strconv.Atoi(m[1])
				want, ok := codes[m[2]]
				switch {
				case !ok:
					t.Errorf("%s names %s %s: the API has no reason %s", r.Alert, m[1], m[2], m[2])
				case want != status:
					t.Errorf("%s says creates answer %s %s: the API answers %s with %d", r.Alert, m[1], m[2], m[2], want)
				}
			}
		}
	}
	// The signer alerts name their answers: quarantined, recovering, cannot sign, no funds.
	if named < 4 {
		t.Fatalf("only %d answers named in the alerts: the check reads nothing", named)
	}
}
