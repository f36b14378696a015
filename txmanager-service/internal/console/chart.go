package console

import (
	"fmt"
	"html/template"
	"math/big"
	"strings"

	"github.com/bionicotaku/txmanager-service/internal/services"
)

// feeChart draws each attempt's fee cap and tip against the base fee it was priced on, and
// the price the mined attempt paid, as an inline SVG: no script, readable in any browser,
// with the same figures in a table beside it for screen readers.
func feeChart(attempts []services.Attempt, paid *big.Int) template.HTML {
	if len(attempts) == 0 {
		return ""
	}
	const (
		width, height     = 640.0, 240.0
		left, right       = 92.0, 20.0
		top, bottom       = 20.0, 40.0
		plotW, plotH      = width - left - right, height - top - bottom
		maxFee, tip, base = "#2563eb", "#16a34a", "#6b7280"
	)
	top0 := new(big.Float)
	for _, a := range attempts {
		for _, v := range []*big.Int{a.MaxFee, a.MaxTip, a.BaseFee, paid} {
			if v != nil && new(big.Float).SetInt(v).Cmp(top0) > 0 {
				top0.SetInt(v)
			}
		}
	}
	ceiling, _ := top0.Float64()
	if ceiling <= 0 {
		ceiling = 1
	}
	ceiling *= 1.15
	x := func(i int) float64 {
		if len(attempts) == 1 {
			return left + plotW/2
		}
		return left + plotW*float64(i)/float64(len(attempts)-1)
	}
	y := func(v *big.Int) float64 {
		f, _ := new(big.Float).SetInt(v).Float64()
		return top + plotH*(1-f/ceiling)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" viewBox="0 0 %.0f %.0f" role="img" aria-labelledby="fee-chart-title" xmlns="http://www.w3.org/2000/svg">`, width, height)
	b.WriteString(`<title id="fee-chart-title">Fee per gas of each attempt against the base fee it was priced on</title>`)
	for i := 0; i <= 4; i++ {
		v := ceiling * float64(i) / 4
		yy := top + plotH*(1-float64(i)/4)
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" class="grid"/>`, left, width-right, yy, yy)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" class="axis" text-anchor="end">%s</text>`, left-6, yy+4, gweiFloat(v))
	}
	series := func(class, colour string, value func(services.Attempt) *big.Int, dashed bool) {
		var points []string
		for i, a := range attempts {
			if v := value(a); v != nil {
				points = append(points, fmt.Sprintf("%.1f,%.1f", x(i), y(v)))
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="4" fill="%s" class="%s"><title>attempt %d: %s</title></circle>`, x(i), y(v), colour, class, i+1, gwei(v))
			}
		}
		if len(points) > 1 {
			dash := ""
			if dashed {
				dash = ` stroke-dasharray="6 4"`
			}
			fmt.Fprintf(&b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s class="%s"/>`, strings.Join(points, " "), colour, dash, class)
		}
	}
	series("series-base", base, func(a services.Attempt) *big.Int { return a.BaseFee }, true)
	series("series-tip", tip, func(a services.Attempt) *big.Int { return a.MaxTip }, false)
	series("series-max", maxFee, func(a services.Attempt) *big.Int { return a.MaxFee }, false)
	if paid != nil {
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#b45309" stroke-width="1.5" class="series-paid"/>`, left, width-right, y(paid), y(paid))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" class="axis" text-anchor="end">paid %s</text>`, width-right, y(paid)-5, gwei(paid))
	}
	for i := range attempts {
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" class="axis" text-anchor="middle">#%d</text>`, x(i), height-bottom+18, i+1)
	}
	legend := []struct{ name, colour string }{{"max fee", maxFee}, {"tip", tip}, {"base fee", base}}
	for i, l := range legend {
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="10" height="10" fill="%s"/><text x="%.1f" y="%.1f" class="axis">%s</text>`,
			left+float64(i)*110, height-12, l.colour, left+float64(i)*110+14, height-3, l.name)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // built from numbers and fixed strings only
}

// gwei shows a per-gas price in gwei.
func gwei(v *big.Int) string {
	if v == nil {
		return "—"
	}
	wei, _ := new(big.Float).SetInt(v).Float64()
	return gweiFloat(wei)
}

func gweiFloat(wei float64) string {
	g := wei / 1e9
	switch {
	case g == 0:
		return "0 gwei"
	case g >= 100:
		return fmt.Sprintf("%.0f gwei", g)
	case g >= 1:
		return fmt.Sprintf("%.2f gwei", g)
	case g >= 0.001:
		return fmt.Sprintf("%.4f gwei", g)
	}
	return fmt.Sprintf("%.0f wei", wei)
}

var etherUnit = new(big.Float).SetInt64(1_000_000_000_000_000_000)

// ether shows an amount in ether with up to six decimals, and the wei when smaller.
func ether(v *big.Int) string {
	if v == nil {
		return "—"
	}
	if v.Cmp(big.NewInt(1_000_000_000_000)) < 0 {
		return v.String() + " wei"
	}
	f := new(big.Float).Quo(new(big.Float).SetInt(v), etherUnit)
	return strings.TrimRight(strings.TrimRight(f.Text('f', 6), "0"), ".") + " ETH"
}
