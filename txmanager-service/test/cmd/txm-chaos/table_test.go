package main

import (
	"maps"
	"strings"
	"testing"
	"time"

	v1 "github.com/bionicotaku/txmanager-service/api/txmanager/v1"
)

func TestRowOK(t *testing.T) {
	t.Parallel()
	tests := []struct {
		want  string
		value int
		ok    bool
	}{
		{"0", 0, true},
		{"0", 1, false},
		{"0", -1, false},
		{"> 0", 1, true},
		{"> 0", 0, false},
		{"> 0", -1, false}, // -1 is what the note readers answer when a figure is missing
		{"= 3", 3, true},
		{"= 3", 4, false},
		{"= 0", 0, true},
		{">= 99", 99, true},
		{">= 99", 100, true},
		{">= 99", 98, false},
		{">= x", 100, false}, // a bound that is not a number never passes
		{"<= 30", 30, true},
		{"<= 30", 31, false},
		{"", -5, true}, // informational
	}
	for _, tc := range tests {
		if got := (row{"check", tc.value, tc.want}).ok(); got != tc.ok {
			t.Errorf("value %d against %q: ok = %v, want %v", tc.value, tc.want, got, tc.ok)
		}
	}
}

func TestPrintTable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		rows      []row
		all       bool
		marks     []string // the verdict at the end of each row's line
		wantInOut []string
	}{
		{
			name:  "every check holds",
			rows:  []row{{"creates attempted", 120, ""}, {"duplicate nonces", 0, "0"}, {"fenced writes", 3, "> 0"}},
			all:   true,
			marks: []string{"", "ok", "ok"},
		},
		{
			name:      "one fails",
			rows:      []row{{"duplicate nonces", 2, "0"}, {"transactions final", 7, "> 0"}},
			all:       false,
			marks:     []string{"FAIL", "ok"},
			wantInOut: []string{"duplicate nonces", "       2"},
		},
		{name: "no rows", all: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var out strings.Builder
			if got := printTable(&out, "chaos (seed 1)", tc.rows); got != tc.all {
				t.Errorf("printTable = %v, want %v", got, tc.all)
			}
			lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
			// A blank line, the title, the header, then one line per row.
			if len(lines) != 3+len(tc.rows) || lines[1] != "chaos (seed 1)" || !strings.Contains(lines[2], "check") {
				t.Fatalf("output:\n%s", out.String())
			}
			for i, mark := range tc.marks {
				line := strings.TrimRight(lines[3+i], " ")
				if mark == "" {
					if strings.HasSuffix(line, "ok") || strings.HasSuffix(line, "FAIL") {
						t.Errorf("informational row has a verdict: %q", line)
					}
				} else if !strings.HasSuffix(line, " "+mark) {
					t.Errorf("row %d: %q, want it to end in %s", i, line, mark)
				}
			}
			for _, s := range tc.wantInOut {
				if !strings.Contains(out.String(), s) {
					t.Errorf("output lacks %q:\n%s", s, out.String())
				}
			}
		})
	}
}

func TestServedPerChain(t *testing.T) {
	t.Parallel()
	feed := []*v1.Completion{
		{TxId: "A1", ChainId: 1337}, {TxId: "a1", ChainId: 1337}, {TxId: "a2", ChainId: 1337},
		{TxId: "a1", ChainId: 31337},
	}
	got := servedPerChain(feed)
	want := map[uint64]map[string]int{1337: {"a1": 2, "a2": 1}, 31337: {"a1": 1}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for chain, ids := range want {
		if !maps.Equal(got[chain], ids) {
			t.Errorf("chain %d: got %v, want %v", chain, got[chain], ids)
		}
	}
}

// The notes of the chain scenario's faults carry the figures its rows check.
func TestNoteFigures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		read func(string) int
		note string
		want int
	}{
		{"spike multiple", spikeMultiple, spikeResult{}.String(), 0},
		{"spike multiple", spikeMultiple, "base fee 7 -> 63 wei (9x) over 17 full blocks", 9},
		{"spike multiple, note without it", spikeMultiple, "spike failed: node gone", -1},
		{"mempool lost", mempoolLost, "burst of 40 creates, then mempool 42 -> 0 transactions across the restart", 42},
		{"mempool lost, some kept", mempoolLost, "burst of 40 creates, then mempool 42 -> 40 transactions across the restart", 2},
		{"confirmed during", confirmedDuring, "preferred endpoint hang for 20s; creates: 97/100 creates acknowledged, p50 1ms p99 2s max 3s; funded signers confirmed 13 during it", 13},
		{"confirmed during, not a number", confirmedDuring, "preferred endpoint hang for 20s; funded signers confirmed many during it", -1},
	}
	for _, tc := range tests {
		if got := tc.read(tc.note); got != tc.want {
			t.Errorf("%s of %q = %d, want %d", tc.name, tc.note, got, tc.want)
		}
	}
}

func TestMetricTotals(t *testing.T) {
	t.Parallel()
	series := map[string]float64{
		`reorg_total{chain_id="1337",otel_scope_name="txm"}`:                    2,
		`reorg_total{chain_id="31337",otel_scope_name="txm"}`:                   1,
		`reprice_total{chain_id="1337",result="raised",otel_scope_name="txm"}`:  5,
		`reprice_total{chain_id="31337",result="raised",otel_scope_name="txm"}`: 1,
		`reprice_total{chain_id="1337",result="at_cap",otel_scope_name="txm"}`:  4,
		`resubmit_total`: 7,
	}
	got := metricTotals(series)
	for key, want := range map[string]float64{
		"reorg_total":                    3,
		`reprice_total`:                  10,
		`reprice_total{result="raised"}`: 6,
		`reprice_total{result="at_cap"}`: 4,
		"resubmit_total":                 7,
		`reorg_total{chain_id="1337",otel_scope_name="txm"}`: 2,
	} {
		if got[key] != want {
			t.Errorf("%s = %v, want %v", key, got[key], want)
		}
	}
	if _, ok := got[`reorg_total{result="raised"}`]; ok {
		t.Error("a result total appeared for a metric without result labels")
	}
}

func TestSuccessPercent(t *testing.T) {
	t.Parallel()
	p := &phaseLoad{stats: map[string]*phaseStats{}}
	healthy := func(phase string) bool { return phase != "node-restart" }
	if pct, n := p.successPercent(healthy); pct != -1 || n != 0 {
		t.Fatalf("no creates: got %d%% of %d, want -1 of 0", pct, n)
	}
	for range 197 {
		p.record("endpoint-hang", true, time.Millisecond)
	}
	for range 3 {
		p.record("endpoint-hang", false, time.Second)
	}
	for range 50 {
		p.record("node-restart", false, time.Second) // left out: no endpoint stayed healthy
	}
	if pct, n := p.successPercent(healthy); pct != 98 || n != 200 {
		t.Fatalf("got %d%% of %d, want 98%% (rounded down from 98.5) of 200", pct, n)
	}
	if got := p.summary("quiet"); got != "no creates" {
		t.Errorf("summary of a phase without creates = %q", got)
	}
	if got := p.summary("endpoint-hang"); !strings.HasPrefix(got, "197/200 creates acknowledged, p50 1ms p99 1s max 1s") {
		t.Errorf("summary = %q", got)
	}
}

func TestOutageSeconds(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(seconds ...float64) []time.Time {
		out := make([]time.Time, len(seconds))
		for i, s := range seconds {
			out[i] = t0.Add(time.Duration(s * float64(time.Second)))
		}
		return out
	}
	fault, until := t0.Add(10*time.Second), t0.Add(40*time.Second)
	tests := []struct {
		name string
		acks []time.Time
		want int
	}{
		{name: "a 26.5 s hole rounds up", acks: at(8, 9, 10, 11, 12, 13, 39.5), want: 27},
		{name: "a 6.2 s hole after the fault rounds up", acks: at(9, 10.3, 16.5, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39), want: 7},
		{name: "holes long before the fault do not count", acks: at(0, 7.5, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39), want: 1},
		{name: "acknowledgements stop for good", acks: at(9, 9.5, 15), want: 25},
		{name: "the next fault's hole is cut at until", acks: at(9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 39.9, 55), want: 1},
		{name: "no acknowledgements at all", acks: nil, want: 0},
	}
	for _, tc := range tests {
		if got := outageSeconds(tc.acks, fault, until); got != tc.want {
			t.Errorf("%s: %d s, want %d s", tc.name, got, tc.want)
		}
	}
}

func TestAckTimeline(t *testing.T) {
	t.Parallel()
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	acks := []time.Time{
		from.Add(-time.Second), // before the window
		from,                   // at its start: not after it
		from.Add(100 * time.Millisecond),
		from.Add(900 * time.Millisecond),
		from.Add(2500 * time.Millisecond),
		from.Add(5 * time.Second), // past the window of 4 s
	}
	if got, want := ackTimeline(acks, from, 4), "2 0 1 0"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}
