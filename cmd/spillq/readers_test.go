package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/spillq/spillq"
)

// statHeader is what stat -format json says about what waits.
type statHeader struct {
	Depth    int64 `json:"depth"`
	Retained int64 `json:"retained_records"`
	Oldest   *struct {
		Seq uint64 `json:"seq"`
	} `json:"oldest_unacknowledged"`
	Lag      float64 `json:"lag_seconds"`
	Deepest  string  `json:"deepest"`
	Slowest  string  `json:"slowest"`
	Deferred int64   `json:"deferred"`
}

func statJSON(t *testing.T, dir string) statHeader {
	t.Helper()
	stdout, _, code := tool3(t, "", "stat", "-format", "json", dir)
	var h statHeader
	if err := json.Unmarshal([]byte(stdout), &h); code != 0 || err != nil {
		t.Fatalf("stat -format json (%d, %v):\n%s", code, err, stdout)
	}
	return h
}

// putAndFinish opens the topic in dir, puts n messages, and has each of
// the channels named in finish receive and finish n messages.
func putAndFinish(t *testing.T, dir string, n int, channels []string, finish ...string) {
	t.Helper()
	tp, err := spillq.OpenTopic(dir, spillq.TopicOptions{})
	if err != nil {
		t.Fatal(err)
	}
	opened := map[string]*spillq.Channel{}
	for _, name := range channels {
		if opened[name], err = tp.Channel(name, spillq.ChannelOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	for i := range n {
		if err := tp.Put(ctx, []byte(fmt.Sprintf("job %d", i))); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range finish {
		for range n {
			m, err := opened[name].Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Finish(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tp.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestStatTopicHeader: stat's header on a topic says what its channels
// have pending, not what its log retains. A drained topic of 7 records
// showed "depth 7 records not acknowledged", a growing lag and "0
// acknowledged, 7 not" (a field report).
func TestStatTopicHeader(t *testing.T) {
	dir := t.TempDir()
	channels := []string{"analytics", "billing"}
	putAndFinish(t, dir, 7, channels, channels...)
	out, code := tool(t, "", "stat", dir)
	for _, want := range []string{
		"depth      0: nothing pending, every channel has finished every record\n",
		"lag        0 (nothing waiting)\n",
		"deferred   0 messages",
		"on disk    seqs 0..6: 7 records retained",
		"  analytics  read seq 7  depth 0  lag 0",
		"  billing  read seq 7  depth 0  lag 0",
	} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("stat of a drained topic (%d) lacks %q:\n%s", code, want, out)
		}
	}
	header, _, _ := strings.Cut(out, "channels   ")
	if strings.Contains(header, "not acknowledged") || strings.Contains(header, "not finished") || strings.Contains(header, "readPos") {
		t.Fatalf("stat of a drained topic says something waits:\n%s", out)
	}
	if h := statJSON(t, dir); h.Depth != 0 || h.Lag != 0 || h.Oldest != nil || h.Retained != 7 || h.Deepest != "" || h.Slowest != "" {
		t.Fatalf("stat -format json of a drained topic: %+v", h)
	}

	// billing finishes 3 more; analytics none of them.
	putAndFinish(t, dir, 3, channels, "billing")
	out, code = tool(t, "", "stat", dir)
	for _, want := range []string{
		"depth      3 records not finished, in channel analytics, the deepest",
		"in channel analytics (its oldest record not finished: seq 7, stored ",
		"on disk    seqs 0..9: 10 records retained",
		"  analytics  read seq 7  depth 3  lag ",
		"  billing  read seq 10  depth 0  lag 0",
	} {
		if code != 0 || !strings.Contains(out, want) {
			t.Fatalf("stat of a topic with a channel behind (%d) lacks %q:\n%s", code, want, out)
		}
	}
	if strings.Contains(out, "nothing pending") {
		t.Fatalf("stat of a topic with a channel behind says nothing is pending:\n%s", out)
	}
	h := statJSON(t, dir)
	if h.Depth != 3 || h.Deepest != "analytics" || h.Slowest != "analytics" || h.Oldest == nil || h.Oldest.Seq != 7 ||
		h.Lag <= 0 || h.Retained != 10 {
		t.Fatalf("stat -format json of a topic with a channel behind: %+v", h)
	}
}

// TestStatTopicNoChannels: a topic no channel reads has nothing pending;
// its records wait on disk for a channel created from the oldest.
func TestStatTopicNoChannels(t *testing.T) {
	dir := t.TempDir()
	putAndFinish(t, dir, 4, nil)
	out, code := tool(t, "", "stat", dir)
	if code != 0 || !strings.Contains(out, "depth      0: no channels, so nothing reads the records on disk") ||
		!strings.Contains(out, "4 records retained") || !strings.Contains(out, "channels   0") {
		t.Fatalf("stat of a topic with no channels (%d):\n%s", code, out)
	}
	if h := statJSON(t, dir); h.Depth != 0 || h.Retained != 4 || h.Oldest != nil {
		t.Fatalf("stat -format json of a topic with no channels: %+v", h)
	}
}
