package integration

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/bionicotaku/txmanager-service/internal/telemetry"
)

// latencyHistograms are cumulative bucket counts read from the service's /metrics, by series
// (the phase of writer_phase_seconds, "in-service" for tx_create_duration_seconds).
type latencyHistograms map[string]histogramCounts

type histogramCounts struct {
	bounds []float64 // upper bounds in seconds, +Inf last
	counts []uint64  // cumulative
}

// scrapeLatencies reads the writer's phases and the in-service create latency from a
// running service. A load phase's profile is the difference of two scrapes.
func scrapeLatencies(tb testing.TB, baseURL string) latencyHistograms {
	tb.Helper()
	resp, err := http.Get(baseURL + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("GET /metrics: %d", resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	out := latencyHistograms{}
	add := func(series string, h *dto.Histogram) {
		sum := out[series]
		if sum.bounds == nil {
			for _, b := range h.GetBucket() {
				sum.bounds = append(sum.bounds, b.GetUpperBound())
				sum.counts = append(sum.counts, 0)
			}
			sum.bounds = append(sum.bounds, math.Inf(1))
			sum.counts = append(sum.counts, 0)
		}
		for i, b := range h.GetBucket() {
			sum.counts[i] += b.GetCumulativeCount()
		}
		sum.counts[len(sum.counts)-1] += h.GetSampleCount()
		out[series] = sum
	}
	for _, m := range families[telemetry.WriterPhaseSeconds].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "phase" {
				add(l.GetValue(), m.GetHistogram())
			}
		}
	}
	for _, m := range families["tx_create_duration_seconds"].GetMetric() {
		add("in-service", m.GetHistogram())
	}
	return out
}

// since is what was recorded between an earlier scrape and this one.
func (after latencyHistograms) since(before latencyHistograms) latencyHistograms {
	out := latencyHistograms{}
	for series, h := range after {
		diff := histogramCounts{bounds: h.bounds, counts: slices.Clone(h.counts)}
		if b, ok := before[series]; ok && len(b.counts) == len(h.counts) {
			for i := range diff.counts {
				diff.counts[i] -= b.counts[i]
			}
		}
		out[series] = diff
	}
	return out
}

// quantile interpolates inside the bucket that holds q, as Prometheus's histogram_quantile
// does; 0 when nothing was recorded.
func (h histogramCounts) quantile(q float64) float64 {
	total := h.counts[len(h.counts)-1]
	if total == 0 {
		return 0
	}
	rank := q * float64(total)
	lower, below := 0.0, uint64(0)
	for i, c := range h.counts {
		if float64(c) >= rank {
			upper := h.bounds[i]
			if math.IsInf(upper, 1) {
				return lower
			}
			return lower + (upper-lower)*(rank-float64(below))/float64(c-below)
		}
		lower, below = h.bounds[i], c
	}
	return lower
}

// reportPhases reports the p50 and p99 of each writer phase and of the in-service
// latency: where the time of the slowest creates goes (queued behind the batch ahead, the
// batch's own statements, its commit's flush) against what the clients saw.
func reportPhases(b *testing.B, phases latencyHistograms) {
	b.Helper()
	var line []string
	for _, series := range []string{telemetry.PhaseQueued, telemetry.PhasePrepare, telemetry.PhaseStatements, telemetry.PhaseCommit, "in-service"} {
		h, ok := phases[series]
		if !ok || h.counts[len(h.counts)-1] == 0 {
			b.Fatalf("no %s latency recorded during the load: the service's /metrics has no writer phases", series)
		}
		p50, p99 := h.quantile(0.5)*1000, h.quantile(0.99)*1000
		b.ReportMetric(p99, series+"-p99-ms")
		line = append(line, fmt.Sprintf("%s p50 %.2f ms p99 %.2f ms (%d)", series, p50, p99, h.counts[len(h.counts)-1]))
	}
	b.Logf("where the time goes: %s", strings.Join(line, "; "))
}
