package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// deadFixture makes a queue with three dead letters: bodies a, b, c (b
// with key kb), each failed with "cannot <body>"; it returns the
// directory and their IDs.
func deadFixture(t *testing.T) (string, []channel.ID) {
	t.Helper()
	dir := t.TempDir()
	q, err := spillq.Open(dir, spillq.Options{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var ids []channel.ID
	for _, b := range []string{"a", "b", "c"} {
		var po channel.PutOptions
		if b == "b" {
			po.Key = []byte("kb")
		}
		if err := q.PutWith(ctx, []byte(b), po); err != nil {
			t.Fatal(err)
		}
		m, err := q.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m.Fail(errors.New("cannot " + b))
		ids = append(ids, m.ID)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, ids
}

// TestDeadCommand: list (text and JSON) runs beside a service; redrive and
// purge refuse a locked queue, want a selection, and do what they say.
func TestDeadCommand(t *testing.T) {
	dir, ids := deadFixture(t)
	q, err := spillq.Open(dir, spillq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	out, code := tool(t, "", "dead", "list", dir)
	if code != 0 || strings.Count(out, "\n") != 3 || !strings.Contains(out, ids[1].String()+" seq=1") || !strings.Contains(out, `key="kb"`) ||
		!strings.Contains(out, `reason=failed attempts=1`) || !strings.Contains(out, `error="channel: message failed: cannot b"`) {
		t.Fatalf("dead list beside a service (%d):\n%s", code, out)
	}
	stdout, _, code := tool3(t, "", "dead", "list", "-json", "-id", ids[2].String(), dir)
	var got struct {
		ID, Body, Reason, Error string
		Attempts                int
	}
	if code != 0 || strings.Count(stdout, "\n") != 1 || json.Unmarshal([]byte(stdout), &got) != nil ||
		got.ID != ids[2].String() || got.Body != "c" || got.Reason != "failed" || got.Attempts != 1 {
		t.Fatalf("dead list -json -id (%d): %+v\n%s", code, got, stdout)
	}
	for _, action := range []string{"redrive", "purge"} {
		if out, code = tool(t, "", "dead", action, "-all", dir); code != 1 || !strings.Contains(out, "stop it first") {
			t.Fatalf("dead %s of an open queue (%d):\n%s", action, code, out)
		}
	}
	q.Close()
	if out, code = tool(t, "", "dead", "redrive", dir); code != 2 || !strings.Contains(out, "-all") {
		t.Fatalf("dead redrive with no selection (%d):\n%s", code, out)
	}
	if out, code = tool(t, "", "dead", "redrive", "-id", ids[1].String(), dir); code != 0 || !strings.Contains(out, "redrove 1 ") {
		t.Fatalf("dead redrive -id (%d):\n%s", code, out)
	}
	if out, code = tool(t, "", "dead", "purge", "-until", time.Now().Add(time.Hour).Format(time.RFC3339), dir); code != 0 || !strings.Contains(out, "purged 2 ") {
		t.Fatalf("dead purge -until (%d):\n%s", code, out)
	}
	if out, code = tool(t, "", "dead", "list", dir); code != 0 || !strings.Contains(out, "no dead letters") {
		t.Fatalf("dead list after purge (%d):\n%s", code, out)
	}
	q, err = spillq.Open(dir, spillq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	m, err := q.Receive(ctx)
	if err != nil || m.ID != ids[1] || string(m.Body) != "b" || string(m.Key) != "kb" || m.Attempts != 1 {
		t.Fatalf("after the redrive: %v, %+v", err, m)
	}
}

// TestDeadCommandTopic: a topic's letters are a channel's, named with
// -channel.
func TestDeadCommandTopic(t *testing.T) {
	dir := t.TempDir()
	tp, err := spillq.OpenTopic(dir, spillq.TopicOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := tp.Channel("billing", spillq.ChannelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tp.Put(ctx, []byte("invoice"))
	m, err := ch.Receive(ctx)
	if err != nil {
		t.Fatal(err)
	}
	m.Fail(errors.New("no customer"))
	// A purge waits for the topic, even with the channel closed: a topic
	// counts a closed channel's letters once (Topic.Stats).
	if err := ch.Close(); err != nil {
		t.Fatal(err)
	}
	if out, code := tool(t, "", "dead", "purge", "-all", "-channel", "billing", dir); code != 1 || !strings.Contains(out, "stop it first") {
		t.Fatalf("dead purge of a closed channel of an open topic (%d):\n%s", code, out)
	}
	if err := tp.Close(); err != nil {
		t.Fatal(err)
	}
	if out, code := tool(t, "", "dead", "list", dir); code != 2 || !strings.Contains(out, "-channel") {
		t.Fatalf("dead list of a topic without -channel (%d):\n%s", code, out)
	}
	if out, code := tool(t, "", "dead", "list", "-channel", "billing", dir); code != 0 || !strings.Contains(out, `body="invoice"`) {
		t.Fatalf("dead list -channel (%d):\n%s", code, out)
	}
	if out, code := tool(t, "", "dead", "redrive", "-all", "-channel", "nope", dir); code != 1 || !strings.Contains(out, `no channel "nope"`) {
		t.Fatalf("dead redrive of an unknown channel (%d):\n%s", code, out)
	}
	if out, code := tool(t, "", "dead", "redrive", "-all", "-channel", "billing", dir); code != 0 || !strings.Contains(out, "redrove 1 ") {
		t.Fatalf("dead redrive -channel (%d):\n%s", code, out)
	}
	if out, code := tool(t, "", "dead", "list", "-channel", "billing", dir); code != 0 || !strings.Contains(out, "no dead letters") {
		t.Fatalf("dead list after the redrive (%d):\n%s", code, out)
	}
}

// TestDeadListDamage: list reports a record that is not a dead letter and
// one that fails its checksum, each on its own line with its seq, lists
// the letters around them, and exits 1 with a count of the damage.
func TestDeadListDamage(t *testing.T) {
	dir, ids := deadFixture(t)
	store := filepath.Join(dir, spillq.DeadDir)
	q, err := diskqueue.Open(store, diskqueue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []string{"junk", "flip-me-please", "also junk"} {
		if err := q.Put(context.Background(), []byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	seg := filepath.Join(store, "00000000000000000000.log")
	b, err := os.ReadFile(seg)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, []byte("flip-me-please"))
	if i < 0 {
		t.Fatal("the record to damage is not in the segment")
	}
	b[i] ^= 0xff
	if err := os.WriteFile(seg, b, 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := tool3(t, "", "dead", "list", dir)
	if code != 1 || strings.Count(stdout, "\n") != 3 || !strings.Contains(stdout, ids[2].String()+" seq=2") {
		t.Fatalf("dead list of a damaged store (%d):\n%s%s", code, stdout, stderr)
	}
	want := []string{
		"spillq dead list: seq 3: not a dead-letter record: 4 bytes, the header alone is 32",
		"spillq dead list: corrupt data: segment 00000000000000000000.log offset 320: records 4..4 skipped: checksum mismatch",
		"spillq dead list: seq 5: not a dead-letter record: 9 bytes, the header alone is 32",
		"spillq dead list: 3 damaged record(s), reported above",
	}
	lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("dead list of a damaged store: stderr\n%s\nwant %d lines", stderr, len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Fatalf("dead list of a damaged store: stderr line %d %q, want it to begin %q", i, lines[i], w)
		}
	}
	if !strings.Contains(lines[1], "corrupt data") {
		t.Fatalf("dead list: the record that fails its checksum: %q", lines[1])
	}
	t.Logf("stderr:\n%s", stderr)
}
