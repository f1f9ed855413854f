package bench

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
	"sort"
	"strings"
)

// Series is one line of the chart: ns per packet against N.
type Series struct {
	Name   string
	Points [][2]float64 // N, ns
	// Missing are the Ns the series could not be measured at (too large
	// to compile or load, say), drawn as crosses on the N axis.
	Missing []float64
	color   string
	dashed  bool
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#17becf"}

// ChartSeries returns the series the chart draws: the no-match time of
// every family at every level, and the floor, the median floor of the
// rows at each N. Skipped rows leave a gap, marked on the N axis.
func ChartSeries(results []Result) []Series {
	var families []string
	byKey := make(map[string]*Series)
	var order []string
	floors := make(map[int][]float64)
	for _, r := range results {
		fi := index(&families, r.Family)
		key := fmt.Sprintf("%s -O%d", r.Family, r.Level)
		s, ok := byKey[key]
		if !ok {
			s = &Series{Name: key, color: palette[fi%len(palette)], dashed: r.Level == 0}
			byKey[key] = s
			order = append(order, key)
		}
		if r.Skipped != "" || r.NoMatchNs == 0 {
			s.Missing = append(s.Missing, float64(r.N))
			continue
		}
		s.Points = append(s.Points, [2]float64{float64(r.N), r.NoMatchNs})
		if r.FloorNs > 0 {
			floors[r.N] = append(floors[r.N], r.FloorNs)
		}
	}
	var out []Series
	for _, k := range order {
		s := byKey[k]
		sort.Slice(s.Points, func(i, j int) bool { return s.Points[i][0] < s.Points[j][0] })
		out = append(out, *s)
	}
	if len(floors) > 0 {
		floor := Series{Name: "empty XDP program (floor)", color: "#444444"}
		for n, v := range floors {
			floor.Points = append(floor.Points, [2]float64{float64(n), median(v)})
		}
		sort.Slice(floor.Points, func(i, j int) bool { return floor.Points[i][0] < floor.Points[j][0] })
		out = append(out, floor)
	}
	return out
}

func index(list *[]string, s string) int {
	for i, x := range *list {
		if x == s {
			return i
		}
	}
	*list = append(*list, s)
	return len(*list) - 1
}

// Chart geometry.
const (
	chartW, chartH = 860, 520
	plotL, plotR   = 80, 600 // plot area, x
	plotT, plotB   = 40, 460 // plot area, y
)

// E2EChartSeries returns the series of the end-to-end chart: the rate
// each engine handled (dropped or forwarded) at every N, one line per
// family and engine; bpfwall's -O0 is dashed.
func E2EChartSeries(results []E2EResult) []Series {
	var families, engines []string
	for _, r := range results {
		index(&families, r.Family)
	}
	byKey := make(map[string]*Series)
	var order []string
	for _, r := range results {
		if r.Engine == "" {
			continue // the family's generation failed: no engine ran
		}
		ei := index(&engines, r.Engine)
		key := r.Engine
		if len(families) > 1 {
			key = r.Family + " " + r.Engine
		}
		s, ok := byKey[key]
		if !ok {
			s = &Series{Name: key, color: palette[ei%len(palette)], dashed: strings.HasSuffix(r.Engine, "-O0")}
			byKey[key] = s
			order = append(order, key)
		}
		if r.Skipped != "" || r.Handled() == 0 {
			s.Missing = append(s.Missing, float64(r.N))
			continue
		}
		s.Points = append(s.Points, [2]float64{float64(r.N), r.Handled()})
	}
	out := make([]Series, 0, len(order))
	for _, k := range order {
		s := byKey[k]
		sort.Slice(s.Points, func(i, j int) bool { return s.Points[i][0] < s.Points[j][0] })
		out = append(out, *s)
	}
	return out
}

// chart is what writeChart draws.
type chart struct {
	title, yLabel, note string
	series              []Series
}

// WriteSVG draws ns per packet (no-match frame) against the number of
// rules, both on log scales, one polyline per family and level.
func WriteSVG(w io.Writer, results []Result) error {
	return writeChart(w, chart{
		title:  "ns per packet that matches no rule (BPF_PROG_TEST_RUN, XDP)",
		yLabel: "ns per packet (log scale)",
		note:   "dashed: -O0, solid: -O1",
		series: ChartSeries(results),
	})
}

// WriteE2ESVG draws the packets per second each engine handled end to
// end against the number of rules, both on log scales.
func WriteE2ESVG(w io.Writer, results []E2EResult) error {
	return writeChart(w, chart{
		title:  "packets per second dropped or forwarded, end to end (veth)",
		yLabel: "packets per second (log scale)",
		series: E2EChartSeries(results),
	})
}

// writeChart draws series of points against N, both on log scales.
func writeChart(w io.Writer, c chart) error {
	series := c.series
	xlo, xhi, ylo, yhi := 1.0, 10.0, 1.0, 10.0
	first := true
	for _, s := range series {
		for _, p := range s.Points {
			if first {
				xlo, xhi, ylo, yhi = p[0], p[0], p[1], p[1]
				first = false
			}
			xlo, xhi = math.Min(xlo, p[0]), math.Max(xhi, p[0])
			ylo, yhi = math.Min(ylo, p[1]), math.Max(yhi, p[1])
		}
	}
	missing := false
	for _, s := range series {
		for _, n := range s.Missing {
			if n > 0 {
				xlo, xhi, missing = math.Min(xlo, n), math.Max(xhi, n), true
			}
		}
	}
	// Whole decades, at least one wide.
	x0, x1 := math.Floor(math.Log10(xlo)), math.Ceil(math.Log10(xhi))
	y0, y1 := math.Floor(math.Log10(ylo)), math.Ceil(math.Log10(yhi))
	if x1 <= x0 {
		x1 = x0 + 1
	}
	if y1 <= y0 {
		y1 = y0 + 1
	}
	px := func(n float64) float64 { return plotL + (math.Log10(n)-x0)/(x1-x0)*(plotR-plotL) }
	py := func(v float64) float64 { return plotB - (math.Log10(v)-y0)/(y1-y0)*(plotB-plotT) }

	b := bufio.NewWriter(w)
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", chartW, chartH, chartW, chartH)
	fmt.Fprintf(b, `<rect width="%d" height="%d" fill="white"/>`+"\n", chartW, chartH)
	fmt.Fprintf(b, `<text x="%d" y="22" font-size="15">%s</text>`+"\n", plotL, html.EscapeString(c.title))
	// Grid and ticks.
	for d := x0; d <= x1; d++ {
		x := px(math.Pow(10, d))
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/>`+"\n", x, plotT, x, plotB)
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x, plotB+18, decade(d))
	}
	for d := y0; d <= y1; d++ {
		y := py(math.Pow(10, d))
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", plotL, y, plotR, y)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", plotL-6, y+4, decade(d))
	}
	fmt.Fprintf(b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#333"/>`+"\n", plotL, plotT, plotR-plotL, plotB-plotT)
	fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="middle">rules (N, log scale)</text>`+"\n", (plotL+plotR)/2, plotB+40)
	fmt.Fprintf(b, `<text transform="translate(24 %d) rotate(-90)" text-anchor="middle">%s</text>`+"\n", (plotT+plotB)/2, html.EscapeString(c.yLabel))
	// Series and legend.
	for i, s := range series {
		pts := make([]string, len(s.Points))
		for j, p := range s.Points {
			pts[j] = fmt.Sprintf("%.1f,%.1f", px(p[0]), py(p[1]))
		}
		dash := ""
		if s.dashed {
			dash = ` stroke-dasharray="6 4"`
		}
		if len(pts) > 0 {
			fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"><title>%s</title></polyline>`+"\n",
				s.color, dash, strings.Join(pts, " "), html.EscapeString(s.Name))
		}
		for _, p := range s.Points {
			fmt.Fprintf(b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", px(p[0]), py(p[1]), s.color)
		}
		for k, n := range s.Missing {
			if n <= 0 {
				continue
			}
			// A cross just above the N axis, stacked per series.
			x, y := px(n), float64(plotB-8-6*((i+k)%6))
			fmt.Fprintf(b, `<path d="M%.1f %.1fl6 6m0 -6l-6 6" stroke="%s" stroke-width="2"><title>%s: not measured at N=%g</title></path>`+"\n",
				x-3, y-3, s.color, html.EscapeString(s.Name), n)
		}
		ly := plotT + 10 + i*20
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`+"\n", plotR+20, ly, plotR+50, ly, s.color, dash)
		fmt.Fprintf(b, `<text x="%d" y="%d">%s</text>`+"\n", plotR+56, ly+4, html.EscapeString(s.Name))
	}
	note := c.note
	if missing {
		if note != "" {
			note += "; "
		}
		note += "×: not measured (too large)"
	}
	if note != "" {
		fmt.Fprintf(b, `<text x="%d" y="%d" fill="#555">%s</text>`+"\n", plotR+20, plotT+10+len(series)*20+8, html.EscapeString(note))
	}
	fmt.Fprintln(b, "</svg>")
	return b.Flush()
}

// decade labels 10^d.
func decade(d float64) string {
	switch v := math.Pow(10, d); {
	case v >= 1e6:
		return fmt.Sprintf("%gM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%gk", v/1e3)
	default:
		return fmt.Sprintf("%g", v)
	}
}
