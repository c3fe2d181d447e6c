package report

import (
	"fmt"
	"html"
	"math"
	"strings"
)

// allChartKinds are the configurations drawn, with their colours.
var allChartKinds = []struct{ kind, color string }{
	{"mem", "#2b6cb0"},
	{"lean", "#805ad5"},
	{"sqlite", "#dd6b20"},
	{"insert", "#a0aec0"},
	{"builtin", "#38a169"},
}

// SVG draws, for each framework and workload at d.Setup.TargetConns
// connections, one bar per configuration: its throughput over the bare
// handler's (median of the per-repetition ratios), with lines at 1.0 and
// at the 0.90 target. Plain SVG, no script, no external resource.
func SVG(d *Data) string {
	ix := indexRuns(d.Runs)
	c := d.Setup.TargetConns
	// Only the configurations the run measured get a bar's place.
	var chartKinds []struct{ kind, color string }
	for _, k := range allChartKinds {
		if hasKind(ix, k.kind) {
			chartKinds = append(chartKinds, k)
		}
	}
	type group struct {
		fw, workload string
		bars         []float64 // per chartKinds, NaN: not measured
	}
	var groups []group
	top := 1.2
	for _, fw := range FrameworkOrder {
		for _, w := range WorkloadOrder {
			g := group{fw: fw, workload: w}
			any := false
			for _, k := range chartKinds {
				r := ix.ratio(cell{fw, k.kind, w, c}, cell{fw, "bare", w, c}, rps)
				g.bars = append(g.bars, r)
				if !math.IsNaN(r) {
					any = true
					top = math.Max(top, r)
				}
			}
			if any {
				groups = append(groups, g)
			}
		}
	}
	top = math.Ceil(top*5) / 5 // a round scale, in steps of 0.2

	const (
		left, right, topPad, bottom = 56.0, 74.0, 50.0, 78.0
		barW, gap, groupGap         = 9.0, 1.0, 14.0
		plotH                       = 260.0
	)
	groupW := float64(len(chartKinds))*(barW+gap) + groupGap
	width := max(left+right+float64(len(groups))*groupW, 760)
	height := topPad + plotH + bottom
	y := func(v float64) float64 { return topPad + plotH*(1-v/top) }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="11">`+"\n",
		width, height, width, height)
	fmt.Fprintf(&b, `<title>Throughput relative to the bare handler (%d connections, loopback)</title>`+"\n", c)
	b.WriteString(`<rect x="0" y="0" width="100%" height="100%" fill="#ffffff"/>` + "\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="16" font-size="13" font-weight="bold">Throughput / bare handler, %d connections (median of repetitions)</text>`+"\n", left, c)
	// Grid and axis labels.
	for v := 0.0; v <= top+1e-9; v += 0.2 {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e2e8f0"/>`+"\n", left, y(v), width-right, y(v))
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%.1f</text>`+"\n", left-6, y(v)+4, v)
	}
	fmt.Fprintf(&b, `<line class="ref" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#1a202c" stroke-width="1.2"/>`+"\n", left, y(1), width-right, y(1))
	fmt.Fprintf(&b, `<line class="ref" x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e53e3e" stroke-dasharray="5,4"/>`+"\n", left, y(0.9), width-right, y(0.9))
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" fill="#e53e3e">0.90 target</text>`+"\n", width-right+4, y(0.9)+10)
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">1.0 = bare</text>`+"\n", width-right+4, y(1)-2)

	for i, g := range groups {
		x0 := left + float64(i)*groupW + groupGap/2
		for j, r := range g.bars {
			if math.IsNaN(r) {
				continue
			}
			x := x0 + float64(j)*(barW+gap)
			fmt.Fprintf(&b, `<rect class="bar" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s %s: %.2f</title></rect>`+"\n",
				x, y(r), barW, y(0)-y(r), chartKinds[j].color, html.EscapeString(FrameworkNames[g.fw]), g.workload,
				html.EscapeString(KindNames[chartKinds[j].kind]), r)
		}
		cx := x0 + float64(len(chartKinds))*(barW+gap)/2
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end" transform="rotate(-45 %.1f %.1f)">%s</text>`+"\n",
			cx, y(0)+14, cx, y(0)+14, html.EscapeString(g.workload))
		if i == 0 || groups[i-1].fw != g.fw {
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-weight="bold">%s</text>`+"\n", x0, height-12, html.EscapeString(FrameworkNames[g.fw]))
			if i > 0 {
				fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#a0aec0"/>`+"\n", x0-groupGap/2, topPad, x0-groupGap/2, y(0)+50)
			}
		}
	}
	// Legend.
	lx := left + 8
	for _, k := range chartKinds {
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="10" height="10" fill="%s"/><text x="%.1f" y="%.1f">%s</text>`+"\n",
			lx, topPad-24, k.color, lx+14, topPad-15, html.EscapeString(KindNames[k.kind]))
		lx += 14 + 7*float64(len(KindNames[k.kind])) + 14
	}
	b.WriteString("</svg>\n")
	return b.String()
}
