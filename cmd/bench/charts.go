package main

import (
	"fmt"
	"image/color"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

var palette = map[string]color.Color{
	"spillq":      color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	"index":       color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	"godiskqueue": color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	"kafka":       color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	"rawfile":     color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff},
	"scan":        color.RGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0xff},
}

// legendNote is, for the impls of the Put chart, what each promises once
// its call returns (durability.go says it in full).
var legendNote = map[string]string{
	"spillq":           " (kernel; fsync every 2,500)",
	"godiskqueue":      " (kernel; fsync every 2,500)",
	"rawfile":          " (kernel; one fsync at the end)",
	"rawfile-sync2500": " (kernel; fsync every 2,500)",
}

// series collects, for benchmarks under prefix, one line per impl of
// metric against the numeric parameter xKey.
func series(results []result, prefix, xKey, unit string) map[string]plotter.XYs {
	out := map[string]plotter.XYs{}
	for _, r := range results {
		if !strings.HasPrefix(r.name, prefix) {
			continue
		}
		x, err := strconv.ParseFloat(r.param(xKey), 64)
		impl := r.param("impl")
		y, _, ok := r.stat(unit)
		if err != nil || impl == "" || !ok {
			continue
		}
		out[impl] = append(out[impl], plotter.XY{X: x, Y: y})
	}
	for _, xys := range out {
		sort.Slice(xys, func(i, j int) bool { return xys[i].X < xys[j].X })
	}
	return out
}

// chart draws log-log lines, one per impl.
func chart(path, title, xLabel, yLabel string, lines map[string]plotter.XYs) error {
	if len(lines) == 0 {
		return fmt.Errorf("%s: no data to draw", path)
	}
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs = vg.Points(12)
	names := make([]string, 0, len(lines))
	maxX := 0.0
	for n, xys := range lines {
		names = append(names, n)
		for _, xy := range xys {
			maxX = max(maxX, xy.X)
		}
	}
	// Room on the right, so the last tick label is not cut off.
	p.X.Max = maxX * 1.6
	sort.Strings(names)
	for _, n := range names {
		l, pts, err := plotter.NewLinePoints(lines[n])
		if err != nil {
			return err
		}
		c, ok := palette[n]
		if !ok {
			c = color.Black
		}
		l.Color, pts.Color = c, c
		pts.Shape = draw.CircleGlyph{}
		p.Add(l, pts)
		p.Legend.Add(n+legendNote[n], l, pts)
	}
	return p.Save(6*vg.Inch, 4*vg.Inch, path)
}

func throughputChart(path string, results []result) error {
	return chart(path, "Put throughput by body size (median)", "body size (bytes)", "MB/s",
		series(results, "BenchmarkPut/", "size", "MB/s"))
}

func lookupChart(path string, results []result) error {
	return chart(path, "Lookup by sequence number (median)", "records in the queue", "ns per lookup",
		series(results, "BenchmarkLookup/", "records", "ns/op"))
}
