package scalesim

import (
	"fmt"
	"math"
	"strings"
)

// Plots are the report's figures as SVG documents, by file name.
func (rep Report) Plots() map[string]string {
	out := map[string]string{}
	var names []string
	var spreads [][]float64
	var loss, closed, disk, host []float64
	for _, r := range rep.Results {
		names = append(names, r.Layout)
		norm := make([]float64, len(r.Spread.PerOSD))
		for i, x := range r.Spread.PerOSD {
			norm[i] = x / r.Spread.Mean
		}
		spreads = append(spreads, norm)
		loss = append(loss, r.LossPerYear)
		closed = append(closed, r.ClosedForm)
		disk = append(disk, r.Disk.Seconds/3600)
		host = append(host, r.Host.Seconds/3600)
	}
	out["spread.svg"] = histograms("Bytes per OSD over the mean", names, spreads, 0.8, 1.2, 40)
	out["rebuild.svg"] = bars("Rebuild time (hours)", names, []string{"a disk", "a host"}, [][]float64{disk, host}, false)
	out["loss.svg"] = bars("Chance of data loss in a year (log scale)", names, []string{"simulated", "textbook MTTDL, disks alone"}, [][]float64{loss, closed}, true)
	return out
}

var colors = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728"}

const plotW, plotH, margin = 640, 360, 50

func svgHead(b *strings.Builder, title string) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", plotW, plotH)
	fmt.Fprintf(b, `<rect width="100%%" height="100%%" fill="white"/><text x="%d" y="20" font-size="14">%s</text>`+"\n", margin, title)
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", margin, plotH-margin, plotW-margin/2, plotH-margin)
}

// histograms draws each series' distribution over [lo, hi) as lines.
func histograms(title string, names []string, series [][]float64, lo, hi float64, bins int) string {
	var b strings.Builder
	svgHead(&b, title)
	counts := make([][]float64, len(series))
	top := 0.0
	for s, xs := range series {
		counts[s] = make([]float64, bins)
		for _, x := range xs {
			i := int((x - lo) / (hi - lo) * float64(bins))
			if i >= 0 && i < bins {
				counts[s][i]++
			}
		}
		for i := range counts[s] {
			counts[s][i] /= float64(max(len(xs), 1))
			top = max(top, counts[s][i])
		}
	}
	x := func(i float64) float64 { return margin + i/float64(bins)*(plotW-1.5*margin) }
	y := func(v float64) float64 { return plotH - margin - v/math.Max(top, 1e-9)*(plotH-2*margin) }
	for s := range counts {
		var pts []string
		for i, c := range counts[s] {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(float64(i)+0.5), y(c)))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", colors[s%len(colors)], strings.Join(pts, " "))
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="%s">%s</text>`+"\n", plotW-170, 40+16*s, colors[s%len(colors)], names[s])
	}
	for _, t := range []float64{lo, (lo + hi) / 2, hi} {
		fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle">%.2f</text>`+"\n", x((t-lo)/(hi-lo)*float64(bins)), plotH-margin+16, t)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// bars draws groups of bars, one group per name, one bar per series.
func bars(title string, names, legend []string, series [][]float64, logScale bool) string {
	var b strings.Builder
	svgHead(&b, title)
	val := func(v float64) float64 {
		if logScale {
			return math.Log10(math.Max(v, 1e-12)) + 12 // 1e-12 at the axis
		}
		return v
	}
	top := 1e-9
	for _, s := range series {
		for _, v := range s {
			top = max(top, val(v))
		}
	}
	groupW := (plotW - 1.5*margin) / float64(max(len(names), 1))
	barW := groupW * 0.8 / float64(len(series))
	for g, name := range names {
		for s := range series {
			h := val(series[s][g]) / top * (plotH - 2*margin)
			x0 := margin + float64(g)*groupW + groupW*0.1 + float64(s)*barW
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n", x0, plotH-margin-h, barW, h, colors[s%len(colors)])
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="10">%.3g</text>`+"\n", x0+barW/2, plotH-margin-h-4, series[s][g])
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", margin+float64(g)*groupW+groupW/2, plotH-margin+16, name)
	}
	for s, l := range legend {
		fmt.Fprintf(&b, `<text x="%d" y="%d" fill="%s">%s</text>`+"\n", plotW-230, 40+16*s, colors[s%len(colors)], l)
	}
	b.WriteString("</svg>\n")
	return b.String()
}
