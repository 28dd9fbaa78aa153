package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// view draws the live view: redrawn in place a few times a second on a
// terminal, one plain line a second otherwise.
type view struct {
	out        io.Writer
	cfg        config
	d          *demo
	start      time.Time
	produceFor time.Duration
	tty        bool
	lines      int // lines drawn last time, to move back over them

	lastAt                time.Time
	lastPut, lastFinished int64
}

func newView(out io.Writer, cfg config, d *demo, start time.Time, produceFor time.Duration) *view {
	tty := false
	if f, ok := out.(*os.File); ok && !cfg.plain {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &view{out: out, cfg: cfg, d: d, start: start, produceFor: produceFor, tty: tty, lastAt: start}
}

func (v *view) interval() time.Duration {
	if v.tty {
		return 200 * time.Millisecond
	}
	return time.Second
}

func (v *view) draw(final bool) {
	v.d.ledger.flush()
	now := time.Now()
	put, fin := v.d.produced.Load(), v.d.finished.Load()
	secs := max(now.Sub(v.lastAt).Seconds(), 1e-9)
	putRate, finRate := float64(put-v.lastPut)/secs, float64(fin-v.lastFinished)/secs
	v.lastAt, v.lastPut, v.lastFinished = now, put, fin
	st := v.d.q.Stats()
	ds := v.d.q.Disk().Stats()
	elapsed := now.Sub(v.start)
	phase := "producing faster than consumers"
	if elapsed >= v.produceFor {
		phase = "draining"
	}
	if final {
		phase = "done"
	}
	if !v.tty {
		if !final {
			fmt.Fprintf(v.out, "t=%4.1fs %-8s put=%d (%.0f/s) finished=%d (%.0f/s) memory=%d/%d disk=%d inflight=%d disk_bytes=%d\n",
				elapsed.Seconds(), strings.Fields(phase)[0], put, putRate, fin, finRate, st.MemoryDepth, st.MemoryBound, st.DiskDepth, st.InFlight, ds.DiskBytes)
		}
		return
	}
	var b strings.Builder
	if v.lines > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", v.lines)
	}
	line := func(format string, a ...any) { fmt.Fprintf(&b, "\x1b[2K"+format+"\n", a...) }
	line("spillq demo  %5.1fs  %s", elapsed.Seconds(), phase)
	line("  put       %9.0f/s  total %d", putRate, put)
	line("  finished  %9.0f/s  total %d  (requeued %d, redelivered %d)", finRate, fin, v.d.requeued.Load(), v.d.redelivered.Load())
	line("  memory    %s %d/%d", bar(st.MemoryDepth, st.MemoryBound, 30), st.MemoryDepth, st.MemoryBound)
	maxDisk := max(st.DiskDepth, int64(v.cfg.mem), 1)
	line("  disk      %s %d waiting, %d spilled in all", bar(int(st.DiskDepth), int(maxDisk), 30), st.DiskDepth, st.Spills)
	line("  in flight %d   deferred %d   on disk %s in %d segment(s)", st.InFlight, st.Deferred, bytesString(ds.DiskBytes), ds.Segments)
	line("  latency   p50 %v  p99 %v  (put to finish)", st.LatencyP50.Round(time.Millisecond), st.LatencyP99.Round(time.Millisecond))
	v.lines = 7
	io.WriteString(v.out, b.String())
}

// bar draws n of max as a gauge of width cells.
func bar(n, max, width int) string {
	if max <= 0 {
		max = 1
	}
	filled := min(width, n*width/max)
	if n > 0 && filled == 0 {
		filled = 1
	}
	return "[" + strings.Repeat("█", filled) + strings.Repeat("·", width-filled) + "]"
}

func bytesString(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
