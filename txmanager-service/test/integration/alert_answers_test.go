package integration

import (
	"net/http"
	"os"
	"regexp"
	"strconv"
	"testing"

	"gopkg.in/yaml.v3"
)

// alertsPath holds the alert rules an operator is paged by.
const alertsPath = "../../../deploy/prometheus/alerts.yaml"

// alertAnswer is the answer ("<status> <REASON>") the named alert tells an operator that
// creates get, so a test of that condition can hold the service to it: the alert's text and
// the service's behaviour are checked against each other.
func alertAnswer(t *testing.T, alert string) (status int, reason string) {
	t.Helper()
	raw, err := os.ReadFile(alertsPath)
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(raw, &rules); err != nil {
		t.Fatal(err)
	}
	answer := regexp.MustCompile(`answer ([1-5]\d\d) ([A-Z][A-Z_]+)`)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert != alert {
				continue
			}
			m := answer.FindStringSubmatch(r.Annotations["description"])
			if m == nil {
				t.Fatalf("alert %s names no answer (\"answer <status> <REASON>\") in its description", alert)
			}
			status, _ = strconv.Atoi(m[1])
			return status, m[2]
		}
	}
	t.Fatalf("no alert %s in %s", alert, alertsPath)
	return 0, ""
}

// requireAlertAnswer fails t unless got is the answer the alert promises.
func requireAlertAnswer(t *testing.T, alert string, got apiResponse) {
	t.Helper()
	status, reason := alertAnswer(t, alert)
	if got.status != status || got.reason() != reason {
		t.Fatalf("alert %s says creates answer %d %s; the service answered %d %s", alert, status, reason, got.status, got.raw)
	}
	if status == http.StatusServiceUnavailable && got.retryAfter == "" {
		t.Fatalf("alert %s: a %d without Retry-After", alert, status)
	}
}
