package spillq_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/internal/procstat"
)

// TestTopicRSSBacklog: a topic with 16 channels, 8 open and not receiving
// and 8 paused, takes 1M 100-byte messages, all of them backlogged in
// every channel. Held in memory per channel, as a design copying each
// message into each channel's memory queue would, that backlog is
// 1M x ~130 B x 16, about 2 GiB; spillq holds it once, in the log, and
// each channel holds only its read-ahead (128 messages and a 256 KiB read
// window). It runs in a child process, so that the peak is this
// workload's alone:
//
//	go test -run TopicRSSBacklog -v .
//
// The bounds, on growth from the child's figures before the first Put:
//
//   - private memory (RssAnon: Go heap, stacks, read buffers), at its
//     highest, at most 32 MiB. What the channels hold is 16 x (128 x
//     ~300 B + 256 KiB), under 5 MiB; the rest is the Go heap between
//     collections (GOGC lets it reach twice what is live; each Put has its
//     own body, the topic taking ownership) and the writer's buffers. The
//     backlog in memory would be 130 MiB per channel; even 16 bytes per
//     message per channel kept for it would be 256 MiB.
//   - peak resident set (VmHWM, which counts the log's mapped pages too)
//     at most 32 MiB + 128 MiB: the active segment is mapped while written
//     (up to MaxSegmentBytes, 100 MiB by default). The writer takes the
//     pages records have filled out of the mapping each round, so few of
//     them count; the bound allows for a writer that falls behind. They
//     are page cache the kernel may drop once written back, not memory
//     the topic holds, and the mapping goes when the segment is sealed.
func TestTopicRSSBacklog(t *testing.T) {
	if testing.Short() {
		t.Skip("1M messages into 16 channels: not under -short")
	}
	start := time.Now()
	cmd := exec.Command(os.Args[0], "-test.run=^TestTopicRSSBacklogChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "SPILLQ_TOPIC_RSS_DIR="+t.TempDir())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	fig := map[string]int64{}
	for _, line := range strings.Split(string(out), "\n") {
		if rest, ok := strings.CutPrefix(line, "topic-rss "); ok {
			k, v, _ := strings.Cut(rest, " ")
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("bad figure %q", line)
			}
			fig[k] = n
		}
	}
	for _, k := range []string{"hwm-before-kb", "hwm-after-kb", "anon-before-kb", "anon-after-kb", "anon-peak-kb", "file-after-kb", "heap-inuse-kb", "messages", "backlog"} {
		if _, ok := fig[k]; !ok {
			t.Fatalf("the child did not report %s:\n%s", k, out)
		}
	}
	anonGrowth := fig["anon-peak-kb"] - fig["anon-before-kb"]
	hwmGrowth := fig["hwm-after-kb"] - fig["hwm-before-kb"]
	backlogMiB := float64(fig["messages"]) * 130 * 16 / (1 << 20)
	t.Logf("%d messages x 16 channels backlogged (each channel's depth %d; that backlog held per channel would be ~%.0f MiB): "+
		"peak RSS %.1f MiB (+%.1f MiB), RssAnon +%.1f MiB at its highest (sampled every 20000 Puts), RssFile %.1f MiB at the end, Go heap in use %.1f MiB; %s in all",
		fig["messages"], fig["backlog"], backlogMiB,
		float64(fig["hwm-after-kb"])/1024, float64(hwmGrowth)/1024, float64(anonGrowth)/1024,
		float64(fig["file-after-kb"])/1024, float64(fig["heap-inuse-kb"])/1024, time.Since(start).Round(time.Millisecond))
	// The race detector shadows the heap (several times its size) and
	// runs a quarter of the messages, whose backlog (~500 MiB) still
	// dwarfs the bound.
	anonBound := int64(32 << 10)
	if raceEnabled {
		anonBound *= 4
	}
	if anonGrowth > anonBound {
		t.Errorf("private memory grew by %.1f MiB with the backlog; want at most %d MiB", float64(anonGrowth)/1024, anonBound>>10)
	}
	if hwmGrowth > (32+128)<<10 {
		t.Errorf("peak RSS grew by %.1f MiB with the backlog; want at most 160 MiB (32 + the mapped active segment)", float64(hwmGrowth)/1024)
	}
}

// TestTopicRSSBacklogChild is TestTopicRSSBacklog's workload, in its own
// process.
func TestTopicRSSBacklogChild(t *testing.T) {
	dir := os.Getenv("SPILLQ_TOPIC_RSS_DIR")
	if dir == "" {
		t.Skip("run by TestTopicRSSBacklog")
	}
	const channels = 16
	n := 1_000_000
	if raceEnabled {
		n /= 4 // see TestTopicRSSBacklog
	}
	tp, err := spillq.OpenTopic(dir, spillq.TopicOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close()
	for i := range channels {
		ch, err := tp.Channel(fmt.Sprintf("ch%02d", i), spillq.ChannelOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			ch.Pause()
		}
	}
	runtime.GC()
	hwm0, anon0 := procstat.PeakRSSKB(), procstat.StatusKB("RssAnon:")
	ctx := context.Background()
	anonPeak := anon0
	for i := range n {
		// Each Put its own body: the topic takes ownership of it.
		if err := tp.Put(ctx, make([]byte, 100)); err != nil {
			t.Fatal(err)
		}
		if i%20_000 == 0 {
			anonPeak = max(anonPeak, procstat.StatusKB("RssAnon:"))
		}
	}
	st := tp.Stats()
	if st.Log.WriteSeq != uint64(n) || len(st.Channels) != channels {
		t.Fatalf("log at %d with %d channels; want %d, %d", st.Log.WriteSeq, len(st.Channels), n, channels)
	}
	backlog := int64(n)
	for _, cs := range st.Channels {
		if cs.Cursor.Depth != int64(n) || cs.Channel.Finishes != 0 {
			t.Fatalf("channel %s: depth %d, %d finished; want every message backlogged", cs.Name, cs.Cursor.Depth, cs.Channel.Finishes)
		}
		backlog = min(backlog, cs.Cursor.Depth)
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	fmt.Printf("topic-rss messages %d\n", n)
	fmt.Printf("topic-rss backlog %d\n", backlog)
	fmt.Printf("topic-rss hwm-before-kb %d\n", hwm0)
	fmt.Printf("topic-rss anon-before-kb %d\n", anon0)
	fmt.Printf("topic-rss hwm-after-kb %d\n", procstat.PeakRSSKB())
	fmt.Printf("topic-rss anon-after-kb %d\n", procstat.StatusKB("RssAnon:"))
	fmt.Printf("topic-rss anon-peak-kb %d\n", max(anonPeak, procstat.StatusKB("RssAnon:")))
	fmt.Printf("topic-rss file-after-kb %d\n", procstat.StatusKB("RssFile:")+procstat.StatusKB("RssShmem:"))
	fmt.Printf("topic-rss heap-inuse-kb %d\n", ms.HeapInuse>>10)
}
