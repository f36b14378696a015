package e2e

import (
	"maps"
	"math"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestParseMetrics(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		page string
		want map[string]float64
		nan  []string // series that must read NaN (NaN equals nothing, so apart from want)
	}{
		{name: "empty page", page: "", want: map[string]float64{}},
		{
			name: "comments, blank lines and plain series",
			page: "# HELP up whether it is up\n# TYPE up gauge\n\nup 1\nlease_fenced_total 3\n",
			want: map[string]float64{"up": 1, "lease_fenced_total": 3},
		},
		{
			name: "labelled series keep their labels",
			page: `reorg_total{chain_id="1337",otel_scope_name="txm"} 2` + "\n" + `reorg_total{chain_id="31337",otel_scope_name="txm"} 0.5`,
			want: map[string]float64{`reorg_total{chain_id="1337",otel_scope_name="txm"}`: 2, `reorg_total{chain_id="31337",otel_scope_name="txm"}`: 0.5},
		},
		{
			name: "a label value with spaces",
			page: `build_info{version="dev build 7"} 1`,
			want: map[string]float64{`build_info{version="dev build 7"}`: 1},
		},
		{
			name: "a timestamp after the value",
			page: "jobs_total 12 1700000000000\n" + `x{a="b"} 4 1700000000000`,
			want: map[string]float64{"jobs_total": 12, `x{a="b"}`: 4},
		},
		{
			name: "special values and exponents",
			page: "a +Inf\nb NaN\nc 1.5e+06\n",
			want: map[string]float64{"a": math.Inf(1), "c": 1.5e6},
			nan:  []string{"b"},
		},
		{
			name: "lines without a number are left out",
			page: "name_only\nbad_value abc\n{} 3\n{a=\"b\"} 3\ngood 2\n",
			want: map[string]float64{"good": 2},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := ParseMetrics(tc.page)
			for _, name := range tc.nan {
				if v, ok := got[name]; !ok || !math.IsNaN(v) {
					t.Errorf("%s = %v (present %v), want NaN", name, v, ok)
				}
				delete(got, name)
			}
			if !maps.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestScrapeCounter(t *testing.T) {
	t.Parallel()
	page := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte("# TYPE database_server_changes_total counter\ndatabase_server_changes_total 4\n" +
			`labelled_total{chain_id="1"} 9` + "\n"))
	}))
	t.Cleanup(page.Close)

	if got, err := ScrapeCounter(t.Context(), page.URL+"/metrics", "database_server_changes_total"); err != nil || got != 4 {
		t.Errorf("got %v, %v; want 4", got, err)
	}
	// Only an unlabelled series answers: the labelled one is another series.
	if _, err := ScrapeCounter(t.Context(), page.URL+"/metrics", "labelled_total"); err == nil {
		t.Error("a labelled-only metric read as an unlabelled counter")
	}
	if _, err := ScrapeCounter(t.Context(), page.URL+"/other", "database_server_changes_total"); err == nil {
		t.Error("a 404 page read as metrics")
	}
}
