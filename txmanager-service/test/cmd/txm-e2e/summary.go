package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// printReport writes the summary table and timings, then what the service logged at WARN
// or above; it prints whatever the run got far enough to measure.
func printReport(out io.Writer, rep *report, wall time.Duration) {
	fmt.Fprintln(out)
	if v := rep.verification; v != nil {
		printTable(out, rep, v)
	}
	t := rep.timings
	if rep.node != "" {
		fmt.Fprintf(out, "first chain's node:     %s (1s blocks); service confirmations.required: %d\n",
			rep.node, rep.confirmations)
	}
	if t.createToConfirmed > 0 {
		fmt.Fprintf(out, "create -> all CONFIRMED: %s (the %d creates were answered within %s)\n",
			t.createToConfirmed.Round(10*time.Millisecond), len(rep.txs), t.createAll.Round(time.Millisecond))
	}
	if t.buildService > 0 {
		fmt.Fprintf(out, "builds:                 node %s, txmanager-service %s\n",
			t.buildNode.Round(10*time.Millisecond), t.buildService.Round(10*time.Millisecond))
	}
	fmt.Fprintf(out, "wall time:              %s\n", wall.Round(10*time.Millisecond))
	if rep.serviceLog != nil {
		printServiceLog(out, rep)
	}
}

func printTable(out io.Writer, rep *report, v *verification) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "chain\tsigner\tcreated\tconfirmed\tbroadcasts\tchain nonce\tdistinct nonces\tnonces 0..%d\ton chain\tcompletions\t\n", rep.perSigner-1)
	var total signerResult
	distinct := 0
	for i, row := range v.lanes {
		contiguous := "ok"
		if !row.nonces.OK() {
			contiguous = "FAIL"
		}
		chain := rep.chains[i/len(rep.signers)]
		fmt.Fprintf(tw, "%d (%s)\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%d\t%d\t\n", chain.id, chain.name, rep.signers[i%len(rep.signers)].Hex(), row.created, row.confirmed,
			row.broadcasts, row.chainNonce, row.nonces.Distinct, contiguous, row.onChain, row.completions)
		total.created += row.created
		total.confirmed += row.confirmed
		total.broadcasts += row.broadcasts
		total.chainNonce += row.chainNonce
		total.onChain += row.onChain
		total.completions += row.completions
		distinct += row.nonces.Distinct
	}
	fmt.Fprintf(tw, "total\t(%d chains x %d signers)\t%d\t%d\t%d\t%d\t%d\t\t%d\t%d\t\n", len(rep.chains), len(rep.signers), total.created, total.confirmed,
		total.broadcasts, total.chainNonce, distinct, total.onChain, total.completions)
	_ = tw.Flush()
	fmt.Fprintf(out, "\ncompletion feed:        %d entries for %d transactions\n", v.completions, len(rep.txs))
}

func printServiceLog(out io.Writer, rep *report) {
	s := rep.serviceLog
	levels := make([]string, 0, len(s.Levels))
	for _, level := range slices.Sorted(maps.Keys(s.Levels)) {
		levels = append(levels, fmt.Sprintf("%s=%d", level, s.Levels[level]))
	}
	fmt.Fprintf(out, "service log lines:      %s (plus %d non-JSON lines)\n", strings.Join(levels, " "), s.Other)
	for _, p := range s.Problems {
		line := fmt.Sprintf("  %5s x%-4d %s", p.Level, p.Count, p.Msg)
		if p.Example != "" {
			line += ": " + p.Example
		}
		fmt.Fprintln(out, line)
	}
}
