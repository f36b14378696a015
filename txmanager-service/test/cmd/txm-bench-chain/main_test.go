package main

import (
	"strings"
	"testing"
	"time"

	"github.com/bionicotaku/lingo-utils/pglocal/pgtest"
)

// The waiting test's database is cloned from a migrated template pgtest builds once per
// test binary; pgtest.Main drops it when the binary ends.
func TestMain(m *testing.M) { pgtest.Main(m) }

func TestMeasurementPerSecond(t *testing.T) {
	t.Parallel()
	tests := []struct {
		m    measurement
		want float64
	}{
		{measurement{transfers: 20000, confirmed: 40 * time.Second}, 500},
		{measurement{transfers: 3, confirmed: 1500 * time.Millisecond}, 2},
		{measurement{transfers: 100}, 0}, // nothing measured: no rate rather than infinity
	}
	for _, tc := range tests {
		if got := tc.m.perSecond(); got != tc.want {
			t.Errorf("%+v: %v/s, want %v/s", tc.m, got, tc.want)
		}
	}
}

func TestPrintResults(t *testing.T) {
	t.Parallel()
	baseline := measurement{transfers: 1000, accepted: 2 * time.Second, confirmed: 10 * time.Second, blocks: 11}
	tests := []struct {
		name    string
		results []result
		target  float64
		want    []string
		absent  []string
	}{
		{name: "nothing measured", want: nil, absent: []string{"signers"}},
		{
			name:    "within target",
			results: []result{{signers: 20, baseline: baseline, service: measurement{transfers: 1000, accepted: 3 * time.Second, confirmed: 12 * time.Second, blocks: 13}}},
			target:  1.5,
			want: []string{
				"20        baseline             2s            10s       11        100",
				"20        service              3s            12s       13         83",
				"20        service / baseline = 1.20x (target <= 1.5x: within target)",
			},
		},
		{
			name:    "above target",
			results: []result{{signers: 1, baseline: baseline, service: measurement{transfers: 1000, confirmed: 16 * time.Second}}},
			target:  1.5,
			want:    []string{"1         service / baseline = 1.60x (target <= 1.5x: ABOVE target)"},
			absent:  []string{"within target"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out strings.Builder
			printResults(&out, tc.results, tc.target)
			for _, line := range tc.want {
				if !strings.Contains(out.String(), line+"\n") {
					t.Errorf("output lacks the line %q:\n%s", line, out.String())
				}
			}
			for _, s := range tc.absent {
				if strings.Contains(out.String(), s) {
					t.Errorf("output has %q:\n%s", s, out.String())
				}
			}
		})
	}
}
