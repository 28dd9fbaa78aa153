package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/spillq/spillq"
)

var busy = frame{
	elapsed: 2400 * time.Millisecond, phase: "producing faster than consumers",
	put: 53208, finished: 23404, putRate: 23091, finishRate: 9681, requeued: 486, redelivered: 482,
	memory: 0, memoryBound: 10000, disk: 29796, peakDisk: 29796, spilled: 35184,
	inFlight: 4, deferred: 4, segments: 2, diskBytes: 5 << 20,
	p50: 786 * time.Millisecond, p99: 1573 * time.Millisecond,
}

// TestRenderFitsWidth: a line as wide as the terminal, or wider, wraps, and
// the next redraw, moving up by the number of lines it drew, misses.
func TestRenderFitsWidth(t *testing.T) {
	for width := 1; width <= 160; width++ {
		lines := render(busy, width)
		if len(lines) != 7 {
			t.Fatalf("width %d: %d lines, want 7", width, len(lines))
		}
		for _, l := range lines {
			if n := utf8.RuneCountInString(l); n >= width && width > 1 {
				t.Fatalf("width %d: line of %d columns: %q", width, n, l)
			}
		}
	}
	// The default layout fits 80 columns whole, bars included, and the
	// bars give way before the figures do.
	for _, width := range []int{80, 70} {
		disk := render(busy, width)[4]
		if !strings.Contains(disk, "]") || !strings.HasSuffix(disk, "29796 waiting (peak 29796), 35184 spilled") {
			t.Fatalf("width %d: disk line %q", width, disk)
		}
	}
}

// TestDiskBarScaledToPeak: during the drain the bar must shrink with the
// backlog, not stay full as it did when scaled to the current backlog.
func TestDiskBarScaledToPeak(t *testing.T) {
	f := busy
	f.disk, f.peakDisk = 7449, 29796 // a quarter of the peak
	disk := render(f, 200)[4]
	if got, want := strings.Count(disk, "█"), barWidth/4; got != want {
		t.Fatalf("disk bar %q: %d cells filled, want %d", disk, got, want)
	}
	f.disk = 0
	if got := strings.Count(render(f, 200)[4], "█"); got != 0 {
		t.Fatalf("empty backlog drawn with %d cells", got)
	}
}

// TestNotATerminal: /dev/null is a character device but not a terminal,
// and a pipe is neither; both get plain lines.
func TestNotATerminal(t *testing.T) {
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	for name, f := range map[string]*os.File{"/dev/null": devNull, "a pipe": w} {
		if v := newView(f, config{}, nil, time.Now(), time.Second); v.tty {
			t.Errorf("%s taken for a terminal", name)
		}
	}
}

// testDemo is a demo over a real queue that nothing produces into.
func testDemo(t *testing.T) *demo {
	t.Helper()
	dir := t.TempDir()
	led, _, err := openLedger(filepath.Join(dir, "ledger"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(led.close)
	q, err := spillq.Open(filepath.Join(dir, "queue"), spillq.Options{MemQueueSize: 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return &demo{q: q, ledger: led}
}

// TestCursorHiddenWhileRedrawing: the cursor is hidden once, from the
// first redraw, and shown again by the final one or by restore (the
// -crash-after kill skips the final draw).
func TestCursorHiddenWhileRedrawing(t *testing.T) {
	var out bytes.Buffer
	v := &view{out: &out, d: testDemo(t), start: time.Now(), produceFor: time.Second, tty: true, fd: -1}
	v.draw(false)
	v.draw(false)
	if !strings.HasPrefix(out.String(), hideCursor) || strings.Count(out.String(), hideCursor) != 1 || strings.Contains(out.String(), showCursor) {
		t.Fatalf("while redrawing: %q", out.String())
	}
	if !strings.Contains(out.String(), "\x1b[7A") {
		t.Fatalf("the second draw does not move back over the first: %q", out.String())
	}
	v.draw(true)
	if !strings.HasSuffix(out.String(), showCursor) {
		t.Fatalf("the final draw leaves the cursor hidden: %q", out.String())
	}

	out.Reset()
	v = &view{out: &out, d: testDemo(t), start: time.Now(), produceFor: time.Second, tty: true, fd: -1}
	v.draw(false)
	v.restore()
	if !strings.HasSuffix(out.String(), showCursor) {
		t.Fatalf("restore leaves the cursor hidden: %q", out.String())
	}
	out.Reset()
	v.restore()
	if out.Len() != 0 {
		t.Fatalf("restore with the cursor shown wrote %q", out.String())
	}
}

// TestTopicViewRedraws: the -topic view redraws its four lines in place,
// each cut to the terminal's width, like the queue's.
func TestTopicViewRedraws(t *testing.T) {
	tp, err := spillq.OpenTopic(t.TempDir(), spillq.TopicOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close()
	td := &topicDemo{topic: tp}
	for _, name := range []string{"billing", "analytics"} {
		ch, err := tp.Channel(name, spillq.ChannelOptions{})
		if err != nil {
			t.Fatal(err)
		}
		td.groups = append(td.groups, &consumerGroup{name: name, ch: ch})
	}
	var out bytes.Buffer
	td.view = &view{out: &out, start: time.Now(), produceFor: time.Second, tty: true, fd: -1}
	td.draw(false)
	td.draw(true)
	if !strings.Contains(out.String(), "\x1b[4A") || !strings.HasSuffix(out.String(), showCursor) {
		t.Fatalf("the topic view does not redraw in place: %q", out.String())
	}
	for _, l := range strings.Split(out.String(), clearLine)[1:] {
		l = strings.TrimSuffix(strings.SplitN(l, "\n", 2)[0], "\n")
		if n := utf8.RuneCountInString(l); n >= 80 {
			t.Errorf("line of %d columns on an 80-column terminal: %q", n, l)
		}
	}
	if !strings.Contains(out.String(), "  analytics ") || !strings.Contains(out.String(), "depth 0  lag 0s") {
		t.Errorf("the topic view lacks a channel's depth and lag: %q", out.String())
	}
}
