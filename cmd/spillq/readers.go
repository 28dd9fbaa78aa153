package main

import (
	"fmt"
	"io"
	"time"
)

// readerSummary is stat's header for a log with no cursor of its own: a
// topic's, read by its channels, or one read only through named cursors.
// What waits there is what its readers have not acknowledged, so the
// header shows the deepest reader's depth and the slowest one's lag. The
// log's own figures, counted from the oldest record retained as if a
// cursor sat there, call every retained record pending: a drained topic
// showed "depth 7 records not acknowledged" and a lag that only grew.
type readerSummary struct {
	noun, verb string // "channel", "finished"; or "cursor", "acknowledged"
	readers    int
	// deepest has the most records not acknowledged, nil when none has
	// any; slowest has the oldest of them that checks out, nil when none
	// does. lagUnknown says a reader has records pending of which none
	// checks out.
	deepest, slowest *cursorReport
	lagUnknown       bool
	// deferred is the messages in a topic's channels' timer stores;
	// deferredUnknown counts the stores that could not be read.
	topic           bool
	deferred        int64
	deferredUnknown int
}

// summarizeReaders finds r's deepest and slowest channels (on a topic)
// or named cursors (on a log read through them).
func summarizeReaders(r *statReport) readerSummary {
	s := readerSummary{noun: "cursor", verb: "acknowledged", topic: r.Topic}
	readers := r.Cursors
	if r.Topic {
		s.noun, s.verb = "channel", "finished"
		readers = make([]cursorReport, 0, len(r.Channels))
		for _, c := range r.Channels {
			readers = append(readers, c.cursorReport)
			s.deferred += c.Deferred
			if c.DeferredError != "" {
				s.deferredUnknown++
			}
		}
	}
	s.readers = len(readers)
	for i := range readers {
		c := &readers[i]
		if c.Depth > 0 && (s.deepest == nil || c.Depth > s.deepest.Depth) {
			s.deepest = c
		}
		switch {
		case c.Oldest != nil && (s.slowest == nil || older(c.Oldest, s.slowest.Oldest)):
			s.slowest = c
		case c.Oldest == nil && c.Depth > 0:
			s.lagUnknown = true
		}
	}
	return s
}

// older reports whether a was stored before b: records stored in the
// same instant go by seq, so of two readers the one further back is the
// slowest.
func older(a, b *oldestRecord) bool {
	return a.Time.Before(b.Time) || a.Time.Equal(b.Time) && a.Seq < b.Seq
}

// apply puts the summary into r's fields for what waits, so the JSON
// says what the text does.
func (s readerSummary) apply(r *statReport) {
	r.Depth, r.Oldest, r.LagSeconds, r.Deepest, r.Slowest = 0, nil, 0, "", ""
	if s.deepest != nil {
		r.Depth, r.Deepest = s.deepest.Depth, s.deepest.Name
	}
	if s.slowest != nil {
		r.Oldest, r.LagSeconds, r.Slowest = s.slowest.Oldest, s.slowest.LagSeconds, s.slowest.Name
	}
	if s.topic {
		r.Deferred = s.deferred
	}
}

// pending reports whether nothing at all waits: no reader has a record
// to acknowledge, and no channel a deferred message (or an unreadable
// timer store).
func (s readerSummary) pending() bool {
	return s.deepest != nil || s.deferred > 0 || s.deferredUnknown > 0
}

// print writes the header's depth, lag and (on a topic) deferred lines.
func (s readerSummary) print(out io.Writer) {
	switch {
	case s.readers == 0:
		fmt.Fprintf(out, "depth      0: no %ss, so nothing reads the records on disk (one created -from oldest gets them)\n", s.noun)
	case !s.pending():
		fmt.Fprintf(out, "depth      0: nothing pending, every %s has %s every record\n", s.noun, s.verb)
	case s.deepest == nil:
		fmt.Fprintf(out, "depth      0: every %s has %s every record in the log (deferred messages below)\n", s.noun, s.verb)
	default:
		fmt.Fprintf(out, "depth      %d records not %s, in %s %s, the deepest (each %s's below)\n",
			s.deepest.Depth, s.verb, s.noun, s.deepest.Name, s.noun)
	}
	switch {
	case s.slowest != nil:
		fmt.Fprintf(out, "lag        %s, in %s %s (its oldest record not %s: seq %d, stored %s)\n",
			time.Duration(s.slowest.LagSeconds*float64(time.Second)).Round(time.Millisecond), s.noun, s.slowest.Name,
			s.verb, s.slowest.Oldest.Seq, s.slowest.Oldest.Time.Format(time.RFC3339Nano))
	case s.lagUnknown:
		fmt.Fprintf(out, "lag        unknown: no record a %s waits for checks out ('spillq verify')\n", s.noun)
	default:
		fmt.Fprintf(out, "lag        0 (nothing waiting)\n")
	}
	if s.topic {
		fmt.Fprintf(out, "deferred   %d messages in the channels' timer stores, delivered when due", s.deferred)
		if s.deferredUnknown > 0 {
			fmt.Fprintf(out, "; %d store(s) could not be read (below)", s.deferredUnknown)
		}
		fmt.Fprintln(out)
	}
}

// printRetained writes the line for the records on disk, which on such a
// log are acknowledged per reader.
func (s readerSummary) printRetained(out io.Writer, firstSeq, writeSeq uint64) {
	if writeSeq <= firstSeq {
		fmt.Fprintf(out, "on disk    no records\n")
		return
	}
	fmt.Fprintf(out, "on disk    seqs %d..%d: %d records retained (kept until every %s has %s all of their segment, or by retention)\n",
		firstSeq, writeSeq-1, writeSeq-firstSeq, s.noun, s.verb)
}
