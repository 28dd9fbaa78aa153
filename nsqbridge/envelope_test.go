package nsqbridge

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	nsq "github.com/nsqio/go-nsq"
)

func TestEnvelopeRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name, topic string
		due         int64
		body        []byte
	}{
		{"plain", "jobs", 0, []byte("hello")},
		{"deferred", "jobs", time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixNano(), []byte("later")},
		{"longest topic", string(bytes.Repeat([]byte("t"), maxTopicLen)), 0, []byte{0}},
		{"ephemeral", "jobs#ephemeral", 1, bytes.Repeat([]byte{0xff}, 1000)},
	} {
		rec := appendEnvelope(nil, tc.topic, tc.due, tc.body)
		if len(rec) > len(tc.body)+maxEnvelopeOverhead {
			t.Errorf("%s: %d bytes of envelope, more than maxEnvelopeOverhead %d", tc.name, len(rec)-len(tc.body), maxEnvelopeOverhead)
		}
		e, err := decodeEnvelope(rec)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if string(e.topic) != tc.topic || e.due != tc.due || !bytes.Equal(e.body, tc.body) {
			t.Fatalf("%s: got %q %d %q", tc.name, e.topic, e.due, e.body)
		}
	}
}

// TestEnvelopeGolden pins the bytes: they are the on-disk format
// (FORMAT.md, "Publisher envelope").
func TestEnvelopeGolden(t *testing.T) {
	got := appendEnvelope(nil, "ab", 0x0102030405060708, []byte("xy"))
	want := []byte{1, 1, 2, 'a', 'b', 1, 2, 3, 4, 5, 6, 7, 8, 'x', 'y'}
	if !bytes.Equal(got, want) {
		t.Fatalf("got % x, want % x", got, want)
	}
	if got := appendEnvelope(nil, "ab", 0, []byte("xy")); !bytes.Equal(got, []byte{1, 0, 2, 'a', 'b', 'x', 'y'}) {
		t.Fatalf("plain: got % x", got)
	}
}

func TestEnvelopeDamage(t *testing.T) {
	good := appendEnvelope(nil, "jobs", 42, []byte("body"))
	for _, tc := range []struct {
		name   string
		damage func([]byte) []byte
	}{
		{"empty", func([]byte) []byte { return nil }},
		{"short header", func(b []byte) []byte { return b[:2] }},
		{"version", func(b []byte) []byte { b[0] = 2; return b }},
		{"unknown flag", func(b []byte) []byte { b[1] |= 0x80; return b }},
		{"no topic", func(b []byte) []byte { b[2] = 0; return b }},
		{"topic too long", func(b []byte) []byte { b[2] = maxTopicLen + 1; return b }},
		{"topic past the end", func(b []byte) []byte { return b[:5] }},
		{"truncated due", func(b []byte) []byte { return b[:3+4+5] }},
		{"zero due", func([]byte) []byte { return []byte{1, envFlagDue, 4, 'j', 'o', 'b', 's', 0, 0, 0, 0, 0, 0, 0, 0, 'x'} }},
		{"bare body", func([]byte) []byte { return []byte("msg-000001") }},
	} {
		b := tc.damage(bytes.Clone(good))
		if _, err := decodeEnvelope(b); !errors.Is(err, ErrBadEnvelope) {
			t.Errorf("%s: got %v, want ErrBadEnvelope", tc.name, err)
		}
	}
}

func TestEnvelopeDelay(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		due  int64
		want time.Duration
	}{
		{0, 0},
		{now.Add(-time.Second).UnixNano(), 0},
		{now.Add(500 * time.Microsecond).UnixNano(), 0},
		{now.Add(1500 * time.Microsecond).UnixNano(), time.Millisecond},
		{now.Add(time.Minute).UnixNano(), time.Minute},
	} {
		if got := (envelope{due: tc.due}).delay(now); got != tc.want {
			t.Errorf("due %d: got %v, want %v", tc.due, got, tc.want)
		}
	}
}

// FuzzDecodeEnvelope: decoding never panics, and what decodes encodes back
// to the same bytes.
func FuzzDecodeEnvelope(f *testing.F) {
	f.Add(appendEnvelope(nil, "jobs", 0, []byte("x")))
	f.Add(appendEnvelope(nil, "jobs", 7, []byte("x")))
	f.Add([]byte{1, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeEnvelope(b)
		if err != nil {
			return
		}
		if again := appendEnvelope(nil, string(e.topic), e.due, e.body); !bytes.Equal(again, b) {
			t.Fatalf("decoded %q %d %q from % x, which encodes to % x", e.topic, e.due, e.body, b, again)
		}
	})
}

// TestValidTopic agrees with go-nsq's IsValidTopicName.
func TestValidTopic(t *testing.T) {
	for _, name := range []string{
		"", "a", "jobs", "a.b_c-D9", "jobs#ephemeral", "#ephemeral", "jobs#ephemera", "a b", "a/b", "ü",
		strings.Repeat("t", 64), strings.Repeat("t", 65), strings.Repeat("t", 54) + "#ephemeral", strings.Repeat("t", 55) + "#ephemeral",
	} {
		if got, want := validTopic(name), nsq.IsValidTopicName(name); got != want {
			t.Errorf("%q: got %v, go-nsq says %v", name, got, want)
		}
	}
}
