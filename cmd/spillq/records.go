package main

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// recordKind is what a queue's record bodies hold.
type recordKind int

const (
	kindUnknown recordKind = iota // no record to tell from
	kindRaw                       // bodies as Put stored them (diskqueue used directly)
	kindChannel                   // channel message envelopes (spillq.Open, FORMAT.md)
)

func (k recordKind) String() string {
	switch k {
	case kindRaw:
		return "raw"
	case kindChannel:
		return "channel"
	}
	return "unknown"
}

// describeKind says what a kind means to an operator.
func describeKind(k recordKind) string {
	switch k {
	case kindRaw:
		return "raw bodies"
	case kindChannel:
		return "channel messages (what spillq.Open and OpenTopic store)"
	}
	return "no records yet to tell what they hold"
}

// The queue's kind is found by decoding, not by a marker file: diskqueue
// logs every file it does not know at each Open (and Verify reports such
// warnings as problems), and a marker would be missing from every queue
// written before it existed. Decoding needs no state, and these checks make
// a raw queue pass for a channel queue only if every sampled body is a
// well-formed version-1 envelope whose put time lies between 2000 and a
// day after the record's own disk timestamp. A channel stamps its message
// before the disk stamps the record, so every real envelope passes; text,
// JSON and protobuf bodies cannot (their first byte is never 0x01 with a
// valid flags byte after it), and random bytes pass one sample in about
// 350,000 (sixteen in a row, practically never). -raw and -channel override
// the guess.
const (
	kindSample   = 16             // records examined
	maxClockSkew = 24 * time.Hour // put time may be this far after the disk timestamp (a clock stepped back)
)

var minPutTime = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// isEnvelope reports whether rec's body is a channel message.
func isEnvelope(rec diskqueue.Record) bool {
	m, err := channel.UnmarshalMessage(rec.Body)
	if err != nil {
		return false
	}
	return !m.Timestamp.Before(minPutTime) && !m.Timestamp.After(rec.Time.Add(maxClockSkew))
}

// detectKind looks at the oldest retained records of q.
func detectKind(q *diskqueue.Queue) recordKind {
	n := 0
	for rec, err := range q.Scan(q.Stats().FirstSeq, math.MaxUint64) {
		if errors.Is(err, diskqueue.ErrCorrupt) {
			continue // damage says nothing about the others
		}
		if err != nil {
			break
		}
		if !isEnvelope(rec) {
			return kindRaw
		}
		if n++; n == kindSample {
			break
		}
	}
	if n == 0 {
		return kindUnknown
	}
	return kindChannel
}

// kindFlags are -channel and -raw, which override detection.
type kindFlags struct{ channel, raw bool }

// registerRead adds the flags of a command that shows records.
func (k *kindFlags) registerRead(fs *flag.FlagSet) {
	fs.BoolVar(&k.channel, "channel", false, "decode records as channel messages (what spillq.Open stores) even if they do not look like them")
	fs.BoolVar(&k.raw, "raw", false, "show records as stored, without decoding channel messages")
}

// registerWrite adds the flags of a command that stores records.
func (k *kindFlags) registerWrite(fs *flag.FlagSet, what string) {
	fs.BoolVar(&k.channel, "channel", false, "store "+what+" as channel messages, for a service using spillq.Open (needed while the queue holds no records)")
	fs.BoolVar(&k.raw, "raw", false, "store "+what+" as raw records, for diskqueue used directly (needed while the queue holds no records)")
}

func (k *kindFlags) check() error {
	if k.channel && k.raw {
		return usageErr("-channel and -raw exclude each other")
	}
	return nil
}

// forced returns the kind the flags ask for, or kindUnknown.
func (k *kindFlags) forced() recordKind {
	switch {
	case k.channel:
		return kindChannel
	case k.raw:
		return kindRaw
	}
	return kindUnknown
}

// resolve returns the flags' kind, else q's.
func (k *kindFlags) resolve(q *diskqueue.Queue) recordKind {
	if f := k.forced(); f != kindUnknown {
		return f
	}
	return detectKind(q)
}

// printer writes records in the chosen format.
type printer struct {
	w      io.Writer
	format string
	kind   recordKind
	// acked, if set, says whether a record is acknowledged, which text
	// and json then show.
	acked func(seq uint64) bool
	kindFlags
}

func (p *printer) flags(fs *flag.FlagSet) {
	fs.StringVar(&p.format, "format", "text", "output format: text, hex or json (one object per line)")
	p.kindFlags.registerRead(fs)
}

// parse parses flags for a command that prints records, and checks them.
func (p *printer) parse(e *env, fs *flag.FlagSet, args []string, n int) ([]string, error) {
	pos, err := parseArgs(e, fs, args, n)
	if err != nil {
		return nil, err
	}
	if err := checkFormat(p.format, "text", "hex", "json"); err != nil {
		return nil, err
	}
	return pos, p.kindFlags.check()
}

func checkFormat(format string, allowed ...string) error {
	for _, a := range allowed {
		if format == a {
			return nil
		}
	}
	return usageErr("-format %q: want one of %q", format, allowed)
}

// print writes rec. A record of a channel queue that does not decode is
// written as stored, and bad says why; err is a failure to write.
func (p *printer) print(rec diskqueue.Record) (bad, err error) {
	body := rec.Body
	var msg *channel.Message
	if p.kind == kindChannel {
		m, derr := channel.UnmarshalMessage(rec.Body)
		if derr != nil {
			bad = fmt.Errorf("seq %d: %w; shown as stored", rec.Seq, derr)
		} else {
			msg, body = m, m.Body
		}
	}
	switch p.format {
	case "json":
		out := map[string]any{"seq": rec.Seq, "time": rec.Time.UTC().Format(time.RFC3339Nano)}
		if p.acked != nil {
			out["acknowledged"] = p.acked(rec.Seq)
		}
		if msg != nil {
			out["id"], out["attempts"], out["put_time"] = msg.ID.String(), msg.Attempts, msg.Timestamp.UTC().Format(time.RFC3339Nano)
			if msg.Key != nil {
				out["key"] = string(msg.Key)
			}
			if due := msg.Due(); !due.IsZero() {
				out["due"] = due.UTC().Format(time.RFC3339Nano)
			}
		}
		if utf8.Valid(body) {
			out["body"] = string(body)
		} else {
			out["body_base64"] = body
		}
		b, _ := json.Marshal(out)
		_, err = fmt.Fprintf(p.w, "%s\n", b)
	case "hex":
		head := fmt.Sprintf("seq %d  %s", rec.Seq, rec.Time.UTC().Format(time.RFC3339Nano))
		if msg != nil {
			head += fmt.Sprintf("  id=%s attempts=%d", msg.ID, msg.Attempts) + dueText(msg)
			if msg.Key != nil {
				head += fmt.Sprintf(" key=%q", msg.Key)
			}
		}
		_, err = fmt.Fprintf(p.w, "%s  %d bytes\n%s", head, len(body), hex.Dump(body))
	default:
		prefix := fmt.Sprintf("%d\t%s\t", rec.Seq, rec.Time.UTC().Format(time.RFC3339Nano))
		if msg != nil {
			prefix += fmt.Sprintf("id=%s attempts=%d", msg.ID, msg.Attempts) + dueText(msg)
			if msg.Key != nil {
				prefix += fmt.Sprintf(" key=%q", msg.Key)
			}
			prefix += "\t"
		}
		if p.acked != nil {
			if p.acked(rec.Seq) {
				prefix += "acknowledged\t"
			} else {
				prefix += "pending\t"
			}
		}
		_, err = fmt.Fprintf(p.w, "%s%s\n", prefix, strconv.Quote(string(body)))
	}
	return bad, err
}

// damage reports damaged records on stderr, so stdout stays data a program
// can parse, and turns them into exit status 1 at the end.
type damage struct {
	w   io.Writer
	cmd string
	n   int
}

func (d *damage) report(err error) {
	d.n++
	fmt.Fprintf(d.w, "spillq %s: %s\n", d.cmd, describe(err))
}

// result returns errProblems, after a summary, if anything was reported.
func (d *damage) result() error {
	if d.n == 0 {
		return nil
	}
	fmt.Fprintf(d.w, "spillq %s: %d damaged record(s), reported above\n", d.cmd, d.n)
	return errProblems
}

// dueText is " due=TIME" for a message that carries a due time (a timer
// store's records, deferred ones of an older main log), else "".
func dueText(m *channel.Message) string {
	if due := m.Due(); !due.IsZero() {
		return " due=" + due.UTC().Format(time.RFC3339Nano)
	}
	return ""
}
