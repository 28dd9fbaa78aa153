package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/term"
)

// Terminal controls the live view uses (ECMA-48, and DEC's for the cursor).
const (
	hideCursor = "\x1b[?25l"
	showCursor = "\x1b[?25h"
	clearLine  = "\x1b[2K"
	clearBelow = "\x1b[J"
)

// view draws the live view: redrawn in place a few times a second on a
// terminal, one plain line a second otherwise (a pipe, a file, /dev/null).
//
// The fields below mu are owned by the goroutine that calls draw; mu
// serialises draw with restore, which the crash timer calls from its own
// goroutine.
type view struct {
	out        io.Writer
	cfg        config
	d          *demo
	start      time.Time
	produceFor time.Duration
	tty        bool
	fd         int // out's descriptor when tty, for its width

	mu                    sync.Mutex
	lines                 int  // lines drawn last time, to move back over them
	hidden                bool // the cursor is hidden
	lastAt                time.Time
	lastPut, lastFinished int64
	peakDisk              int64 // the most messages on disk so far: the disk bar's full scale
}

func newView(out io.Writer, cfg config, d *demo, start time.Time, produceFor time.Duration) *view {
	v := &view{out: out, cfg: cfg, d: d, start: start, produceFor: produceFor, lastAt: start}
	// A character device is not enough: /dev/null is one. IsTerminal asks
	// the terminal driver.
	if f, ok := out.(*os.File); ok && !cfg.plain && term.IsTerminal(int(f.Fd())) && enableEscapes(int(f.Fd())) {
		v.tty, v.fd = true, int(f.Fd())
	}
	return v
}

func (v *view) interval() time.Duration {
	if v.tty {
		return 200 * time.Millisecond
	}
	return time.Second
}

// width is the terminal's width now (it may have been resized since the
// last draw), or 80 if it cannot be asked.
func (v *view) width() int {
	if w, _, err := term.GetSize(v.fd); err == nil && w > 0 {
		return w
	}
	return 80
}

// frame is what one draw shows.
type frame struct {
	elapsed                      time.Duration
	phase                        string
	put, finished                int64
	putRate, finishRate          float64
	requeued, redelivered        int64
	memory, memoryBound          int
	disk, peakDisk, spilled      int64
	inFlight, deferred, segments int
	diskBytes                    int64
	p50, p99                     time.Duration
}

func (v *view) draw(final bool) {
	v.d.ledger.flush()
	v.mu.Lock()
	defer v.mu.Unlock()
	now := time.Now()
	put, fin := v.d.produced.Load(), v.d.finished.Load()
	secs := max(now.Sub(v.lastAt).Seconds(), 1e-9)
	f := frame{
		elapsed: now.Sub(v.start), put: put, finished: fin,
		putRate: float64(put-v.lastPut) / secs, finishRate: float64(fin-v.lastFinished) / secs,
		requeued: v.d.requeued.Load(), redelivered: v.d.redelivered.Load(),
	}
	v.lastAt, v.lastPut, v.lastFinished = now, put, fin
	st := v.d.q.Stats()
	ds := v.d.q.Disk().Stats()
	v.peakDisk = max(v.peakDisk, st.DiskDepth)
	f.memory, f.memoryBound = st.MemoryDepth, st.MemoryBound
	f.disk, f.peakDisk, f.spilled = st.DiskDepth, v.peakDisk, st.Spills
	f.inFlight, f.deferred, f.segments, f.diskBytes = st.InFlight, st.Deferred, ds.Segments, ds.DiskBytes
	f.p50, f.p99 = st.LatencyP50, st.LatencyP99
	f.phase = v.phase(final, v.d.stopped.Load(), f.elapsed)
	if !v.tty {
		if !final {
			fmt.Fprintf(v.out, "t=%4.1fs %-8s put=%d (%.0f/s) finished=%d (%.0f/s) memory=%d/%d disk=%d inflight=%d disk_bytes=%d\n",
				f.elapsed.Seconds(), strings.Fields(f.phase)[0], f.put, f.putRate, f.finished, f.finishRate, f.memory, f.memoryBound, f.disk, f.inFlight, f.diskBytes)
		}
		return
	}
	v.paintLocked(render(f, v.width()), final)
}

// phase names the part of the run a frame drawn elapsed into it shows.
func (v *view) phase(final, stopped bool, elapsed time.Duration) string {
	switch {
	case final && stopped:
		return "stopped"
	case final:
		return "done"
	case stopped:
		return "stopping (Close writes what is left to disk)"
	case elapsed >= v.produceFor:
		return "draining"
	}
	return "producing faster than consumers"
}

// paintLocked draws lines, each shorter than the terminal is wide, over
// the ones drawn last, and shows the cursor again if final. The caller
// holds v.mu.
func (v *view) paintLocked(lines []string, final bool) {
	var b strings.Builder
	if !v.hidden {
		b.WriteString(hideCursor) // no cursor flickering over the redraw
		v.hidden = true
	}
	// Back to the first column before moving up: a ^C the terminal echoed
	// moved the cursor right, and a first line drawn from there would wrap.
	b.WriteByte('\r')
	if v.lines > 0 {
		fmt.Fprintf(&b, "\x1b[%dA", v.lines)
	}
	for _, l := range lines {
		b.WriteString(clearLine + l + "\n")
	}
	// Whatever a resize left below the view (a terminal may rewrap old
	// lines) goes too.
	b.WriteString(clearBelow)
	v.lines = len(lines)
	if final {
		b.WriteString(showCursor)
		v.hidden = false
	}
	io.WriteString(v.out, b.String())
}

// restore shows the cursor again if the view hid it, for exits that skip
// the final draw (the -crash-after kill).
func (v *view) restore() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.hidden {
		io.WriteString(v.out, showCursor)
		v.hidden = false
	}
}

// barWidth is the widest a gauge is drawn.
const barWidth = 30

// render lays a frame out for a terminal width columns wide. Every line is
// shorter than width: a line that fills the last column makes some
// terminals wrap at once, and then moving back up by the number of lines
// drawn misses, leaving fragments. The gauges shrink first; what still
// does not fit is cut.
func render(f frame, width int) []string {
	limit := max(width-1, 1)
	fit := func(s string) string { return fitWidth(s, width) }
	// gauge puts a bar of n out of full into format's %s, as wide as the
	// line allows.
	gauge := func(n, full int64, format string, a ...any) string {
		rest := fmt.Sprintf(format, append([]any{""}, a...)...)
		w := min(barWidth, limit-utf8.RuneCountInString(rest)-2)
		if w < 4 {
			return fit(rest) // no room for a bar worth reading
		}
		return fmt.Sprintf(format, append([]any{bar(n, full, w)}, a...)...)
	}
	lines := []string{
		fmt.Sprintf("spillq demo  %5.1fs  %s", f.elapsed.Seconds(), f.phase),
		fmt.Sprintf("  put       %9.0f/s  total %d", f.putRate, f.put),
		fmt.Sprintf("  finished  %9.0f/s  total %d  (requeued %d, redelivered %d)", f.finishRate, f.finished, f.requeued, f.redelivered),
		gauge(int64(f.memory), int64(f.memoryBound), "  memory    %s %d/%d", f.memory, f.memoryBound),
		gauge(f.disk, f.peakDisk, "  disk      %s %d waiting (peak %d), %d spilled", f.disk, f.peakDisk, f.spilled),
		fmt.Sprintf("  in flight %d   deferred %d   on disk %s in %d segment(s)", f.inFlight, f.deferred, bytesString(f.diskBytes), f.segments),
		fmt.Sprintf("  latency   p50 %v  p99 %v  (put to finish)", f.p50.Round(time.Millisecond), f.p99.Round(time.Millisecond)),
	}
	for i, l := range lines {
		lines[i] = fit(l)
	}
	return lines
}

// fitWidth cuts s to fewer columns than width (see render).
func fitWidth(s string, width int) string {
	limit := max(width-1, 1)
	if utf8.RuneCountInString(s) <= limit {
		return s
	}
	return string([]rune(s)[:limit])
}

// bar draws n of full as a gauge of width cells between brackets.
func bar(n, full int64, width int) string {
	full = max(full, 1)
	filled := int(min(int64(width), n*int64(width)/full))
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
