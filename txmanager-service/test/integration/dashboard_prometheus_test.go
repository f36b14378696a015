package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"

	"github.com/bionicotaku/txmanager-service/internal/telemetry"
	"github.com/bionicotaku/txmanager-service/test/e2e"
)

// dashboardPath is the Grafana dashboard shipped in deploy/, relative to this package.
const dashboardPath = "../../../deploy/grafana/txmanager.json"

// metricsOnlyAfterAnEvent are counters the service exports only once what they count has
// happened (OpenTelemetry exports no series for a counter never added to); a short run with
// healthy traffic produces none of them. Named by the service's own constants, so a
// dashboard typo matches neither the scrape nor this list.
func metricsOnlyAfterAnEvent() []string {
	return []string{
		telemetry.LeaseFencedTotal, telemetry.ResubmitTotal, telemetry.StuckTotal, telemetry.ReorgTotal,
		telemetry.RateLimitedTotal, telemetry.RepriceTotal, telemetry.NonceHoleFilledTotal,
		telemetry.RetentionPrunedTotal, telemetry.RecognisedTotal,
		// Webhook deliveries, and the lag of subscriptions this node delivers: none without
		// a subscription.
		telemetry.WebhookDeliveriesTotal, telemetry.WebhookLagSeconds,
		// The library's retry and failure counters (lingo-utils/txmanager): no retry, no failure.
		"db_tx_retries_total", "db_tx_failures_total",
	}
}

type dashboardPanel struct {
	Title   string `json:"title"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"` // a collapsed row holds its panels
}

type dashboardQuery struct{ panel, expr string }

// Every query of the Grafana dashboard runs against a real Prometheus that scraped the
// service through creates and confirmations: each must parse and evaluate, each metric it
// names must be one the service exports, and the traffic's own series must hold data.
func TestDashboardQueriesAgainstPrometheus(t *testing.T) {
	t.Parallel()
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		pgtest.Unavailable(t, "prometheus is needed (apt-get install prometheus)", err)
	}
	panels, queries := loadDashboardQueries(t)
	s := startService(t, serviceOptions{fastPipeline: true})
	var ids []string
	for i := range 20 {
		ids = append(ids, s.createOK(t, map[string]any{"signer": devAddress(t, i%4), "to": devAddress(t, 6), "value": fmt.Sprint(i + 1), "gasLimit": 21000}))
	}
	for _, id := range ids {
		waitFor(t, time.Minute, "transaction "+id+" confirmed", func() bool { return s.tx(t, id).state == "CONFIRMED" })
	}
	exported := exportedMetricNames(t, s)

	prom := startPrometheus(t, promBin, strings.TrimPrefix(s.httpURL, "http://"))
	// rate() needs two samples in its window: wait for a handful of scrapes.
	waitFor(t, time.Minute, "Prometheus to scrape the service five times", func() bool {
		v, ok := prom.scalar(t, `count_over_time(up{job="txmanager"}[1m])`)
		return ok && v >= 5
	})
	if v, ok := prom.scalar(t, `min(up{job="txmanager"})`); !ok || v != 1 {
		t.Fatalf("up{job=\"txmanager\"} = %v (present %v): Prometheus cannot scrape the service", v, ok)
	}

	withData := 0
	for _, q := range queries {
		for _, name := range metricNames(q.expr) {
			if !exported[name] && !slices.Contains(metricsOnlyAfterAnEvent(), name) {
				t.Errorf("panel %q: metric %s is not exported by the service (expr %s)", q.panel, name, q.expr)
			}
		}
		result, err := prom.query(strings.ReplaceAll(q.expr, "$__rate_interval", "30s"))
		if err != nil {
			t.Errorf("panel %q: %s: %v", q.panel, q.expr, err)
			continue
		}
		if result > 0 {
			withData++
		}
	}
	// The series the traffic itself produced must answer with data.
	for _, expr := range []string{
		`sum by (result) (rate(tx_create_total[30s]))`,
		`sum by (result) (rate(tx_submit_total[30s]))`,
		`sum by (result) (rate(receipt_check_total[30s]))`,
		`histogram_quantile(0.99, sum by (result, le) (rate(tx_create_duration_seconds_bucket[30s])))`,
		`min by (endpoint) (chain_endpoint_up)`,
		`max by (signer) (signer_balance_wei) / 1e18`,
	} {
		if n, err := prom.query(expr); err != nil || n == 0 {
			t.Errorf("%s: %d series, %v; want data after 20 confirmed transactions", expr, n, err)
		}
	}
	t.Logf("%d panels with queries, %d queries evaluated by Prometheus, %d returned series", panels, len(queries), withData)
	if panels < 20 || len(queries) < panels {
		t.Fatalf("%d panels and %d queries read from the dashboard; the dashboard has lost its panels", panels, len(queries))
	}
}

func loadDashboardQueries(t *testing.T) (int, []dashboardQuery) {
	t.Helper()
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []dashboardPanel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	panels := 0
	var queries []dashboardQuery
	var walk func([]dashboardPanel)
	walk = func(ps []dashboardPanel) {
		for _, p := range ps {
			if len(p.Targets) > 0 {
				panels++
			}
			for _, target := range p.Targets {
				queries = append(queries, dashboardQuery{panel: p.Title, expr: target.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return panels, queries
}

var (
	// Clauses whose parentheses hold label names, and the selector and range brackets.
	labelLists = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)|\{[^}]*\}|\[[^\]]*\]`)
	// An identifier not glued to a digit or a dot (so "1e18" is no name); a function is
	// one followed by "(".
	identifier = regexp.MustCompile(`(?:^|[^a-zA-Z0-9_:.])([a-zA-Z_:][a-zA-Z0-9_:]*)`)
)

// metricNames lists the metrics an expression selects, with histogram suffixes removed.
func metricNames(expr string) []string {
	keywords := []string{"and", "or", "unless", "bool", "offset"}
	var names []string
	plain := labelLists.ReplaceAllString(expr, " ")
	for _, m := range identifier.FindAllStringSubmatchIndex(plain, -1) {
		name := plain[m[2]:m[3]]
		isCall := strings.HasPrefix(strings.TrimLeft(plain[m[3]:], " \t\n"), "(")
		if isCall || slices.Contains(keywords, name) {
			continue
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			name = strings.TrimSuffix(name, suffix)
		}
		names = append(names, name)
	}
	return names
}

// exportedMetricNames reads the families the service exposes on /metrics.
func exportedMetricNames(t *testing.T, s *testService) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for name := range s.metricSums(t) {
		names[name] = true
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			names[strings.TrimSuffix(name, suffix)] = true
		}
	}
	return names
}

type prometheusServer struct {
	base   string
	client *http.Client
}

// startPrometheus runs a real Prometheus scraping target every second, as a child this
// test waits on. It listens on port 0 and the test reads the bound port from its log.
func startPrometheus(t *testing.T, bin, target string) *prometheusServer {
	t.Helper()
	dir := t.TempDir()
	config := fmt.Sprintf("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: txmanager\n    static_configs:\n      - targets: [%q]\n", target)
	configPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(configPath, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	proc, err := e2e.StartProcess(t.Context(), e2e.ProcessOptions{
		Name: "prometheus", Bin: bin, LogPath: filepath.Join(dir, "prometheus.log"), Timeout: 30 * time.Second,
		Args:     []string{"--config.file=" + configPath, "--storage.tsdb.path=" + filepath.Join(dir, "data"), "--web.listen-address=127.0.0.1:0", "--log.level=info"},
		Announce: regexp.MustCompile(`msg="Listening on" address=(\S+)`),
	})
	if err != nil {
		t.Fatalf("start prometheus: %v", err)
	}
	t.Cleanup(proc.Kill)
	return &prometheusServer{base: "http://" + proc.Announced(), client: &http.Client{Timeout: 10 * time.Second}}
}

// query evaluates expr now and returns how many series or samples it answered.
func (p *prometheusServer) query(expr string) (int, error) {
	result, err := p.instant(expr)
	if err != nil {
		return 0, err
	}
	switch result.ResultType {
	case "vector", "matrix":
		var series []json.RawMessage
		if err := json.Unmarshal(result.Result, &series); err != nil {
			return 0, fmt.Errorf("decode %s result: %w", result.ResultType, err)
		}
		return len(series), nil
	default:
		return 1, nil
	}
}

// scalar evaluates expr and returns its single sample's value, if there is one.
func (p *prometheusServer) scalar(t *testing.T, expr string) (float64, bool) {
	t.Helper()
	result, err := p.instant(expr)
	if err != nil {
		return 0, false
	}
	var series []struct {
		Value [2]any `json:"value"`
	}
	if json.Unmarshal(result.Result, &series) != nil || len(series) != 1 {
		return 0, false
	}
	text, _ := series[0].Value[1].(string)
	var v float64
	if _, err := fmt.Sscan(text, &v); err != nil {
		return 0, false
	}
	return v, true
}

type promResult struct {
	ResultType string          `json:"resultType"`
	Result     json.RawMessage `json:"result"`
}

func (p *prometheusServer) instant(expr string) (promResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base+"/api/v1/query?"+url.Values{"query": {expr}}.Encode(), nil)
	if err != nil {
		return promResult{}, err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return promResult{}, err
	}
	defer resp.Body.Close()
	var answer struct {
		Status    string     `json:"status"`
		ErrorType string     `json:"errorType"`
		Error     string     `json:"error"`
		Data      promResult `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
		return promResult{}, fmt.Errorf("decode Prometheus answer (HTTP %d): %w", resp.StatusCode, err)
	}
	if answer.Status != "success" {
		return promResult{}, fmt.Errorf("prometheus: %s: %s", answer.ErrorType, answer.Error)
	}
	return answer.Data, nil
}

func TestMetricNamesInDashboardExpressions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		expr string
		want []string
	}{
		{"signer_quarantined", []string{"signer_quarantined"}},
		{"max by (signer) (signer_balance_wei) / 1e18", []string{"signer_balance_wei"}},
		{"signer_balance_wei / 1e18", []string{"signer_balance_wei"}},
		{`histogram_quantile(0.99, sum by (method, le) (rate(db_tx_duration_seconds_bucket{method="x"}[$__rate_interval])))`, []string{"db_tx_duration_seconds"}},
		{"a_total + on(instance) group_left(signer) b_total", []string{"a_total", "b_total"}},
		{"sum(rate(x_sum[5m])) / sum(rate(x_count[5m])) > bool 0", []string{"x", "x"}},
	}
	for _, tt := range tests {
		if got := metricNames(tt.expr); !slices.Equal(got, tt.want) {
			t.Errorf("metricNames(%q) = %v, want %v", tt.expr, got, tt.want)
		}
	}
}
