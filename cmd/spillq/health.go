package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/diskqueue"
)

func writeJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// The commands about the queue's health: stat, verify and repair.

// statReport is stat's answer; its JSON form is stat -format json.
type statReport struct {
	Queue   string `json:"queue"`
	Records string `json:"records"` // raw, channel or unknown
	// Depth is the records not acknowledged. On a log with no cursor of
	// its own (a topic's, or one read through named cursors only) it is
	// the deepest channel's or cursor's, named by Deepest.
	Depth int64 `json:"depth"`
	// RetainedRecords is the records on disk, seqs FirstSeq to WriteSeq-1,
	// acknowledged or not.
	RetainedRecords int64    `json:"retained_records"`
	FirstSeq        uint64   `json:"first_seq"`
	ReadSeq         uint64   `json:"read_seq"`
	WriteSeq        uint64   `json:"write_seq"`
	ReadPos         position `json:"read_pos"`
	WritePos        position `json:"write_pos"`
	// Oldest is the oldest unacknowledged record that checks out, nil when
	// nothing waits; LagSeconds is its age. On a log with no cursor of its
	// own they are the slowest channel's or cursor's, named by Slowest.
	Oldest     *oldestRecord `json:"oldest_unacknowledged,omitempty"`
	LagSeconds float64       `json:"lag_seconds"`
	// Deepest and Slowest name the channel or cursor whose depth is Depth
	// and the one whose lag is LagSeconds, on a log with no cursor of its
	// own; empty when none has anything pending.
	Deepest   string `json:"deepest,omitempty"`
	Slowest   string `json:"slowest,omitempty"`
	DiskBytes int64  `json:"disk_bytes"`
	// FreeBytes is the space left on the directory's file system for
	// appends (-1 if it cannot be told): at none, Put fails with
	// ErrDiskFull until consumers free a segment.
	FreeBytes int64      `json:"fs_free_bytes"`
	Segments  []fileInfo `json:"segments"`
	BadFiles  []badFile  `json:"bad_files"`
	// Cursors are the log's named cursors (diskqueue.Log.Cursor), each a
	// consumer group reading every record at its own pace; the fields
	// above are the queue's own cursor's.
	Cursors []cursorReport `json:"cursors,omitempty"`
	// Topic says the directory is a topic's (spillq.OpenTopic): its named
	// cursors are its channels, listed in Channels rather than Cursors.
	// A topic's log has no cursor of its own: ReadSeq and ReadPos are
	// those of the oldest record retained. Deferred is the messages in
	// every channel's timer store.
	Topic    bool            `json:"topic"`
	Deferred int64           `json:"deferred,omitempty"`
	Channels []channelReport `json:"channels,omitempty"`
}

// cursorReport is one named cursor in stat.
type cursorReport struct {
	Name    string `json:"name"`
	ReadSeq uint64 `json:"read_seq"`
	// Depth is the records not acknowledged: a channel's lag in records.
	Depth int64 `json:"depth"`
	// InFlight is the records handed out and not acknowledged as this
	// read-only view sees them, which is none: which records a consumer
	// holds is in its memory only. A running service's deliveries count
	// in Depth (a crash delivers them again); a topic's channel that
	// closed cleanly moved them to its timer store (Deferred).
	InFlight int64 `json:"in_flight"`
	// Oldest and LagSeconds are as for the queue: the oldest record the
	// cursor has not acknowledged that checks out, and its age.
	Oldest     *oldestRecord `json:"oldest_unacknowledged,omitempty"`
	LagSeconds float64       `json:"lag_seconds"`
}

// channelReport is one channel of a topic in stat: its cursor, and its
// timer store (channels/NAME).
type channelReport struct {
	cursorReport
	// Deferred is the messages in the timer store: put or requeued with a
	// delay and not yet due or finished, and what the channel held in
	// memory when it last closed (delivered first when it opens again).
	// Zero for a channel never opened, which has no timer store yet.
	Deferred int64 `json:"deferred"`
	// DeferredError says why the timer store could not be read; Deferred
	// is then 0.
	DeferredError string `json:"deferred_error,omitempty"`
}

// timerDepth returns the depth of the timer store of the channel name in
// the topic's directory dir, opened read-only.
func timerDepth(dir, name string) (int64, error) {
	timers := filepath.Join(dir, spillq.ChannelsDir, name)
	if _, err := os.Stat(timers); errors.Is(err, fs.ErrNotExist) {
		return 0, nil // made when the service first opens the channel
	}
	t, err := openRead(timers)
	if err != nil {
		return 0, err
	}
	defer t.Close()
	return t.Depth(), nil
}

// oldestUnacked returns the oldest record at or after from that checks
// out, and its age at now.
func oldestUnacked(q *diskqueue.Queue, from, to uint64, now time.Time) (*oldestRecord, float64) {
	for rec, err := range q.Scan(from, to) {
		if err == nil {
			return &oldestRecord{Seq: rec.Seq, Time: rec.Time.UTC()}, max(now.Sub(rec.Time), 0).Seconds()
		}
		if !errors.Is(err, diskqueue.ErrCorrupt) {
			break
		}
	}
	return nil, 0
}

// position is a diskqueue.Position with the JSON names of the rest.
type position struct {
	Segment uint64 `json:"segment"`
	Offset  int64  `json:"offset"`
}

type oldestRecord struct {
	Seq  uint64    `json:"seq"`
	Time time.Time `json:"time"`
}

// dirAndFormat parses the arguments of a command that takes a queue
// directory and -format text|json.
func dirAndFormat(e *env, name string, args []string) (dir, format string, err error) {
	fs := newFlags(name)
	f := fs.String("format", "text", "output format: text or json")
	pos, err := parseArgs(e, fs, args, 1)
	if err != nil {
		return "", "", err
	}
	if err := checkFormat(*f, "text", "json"); err != nil {
		return "", "", err
	}
	return pos[0], *f, nil
}

func cmdStat(e *env, args []string) error {
	dir, format, err := dirAndFormat(e, "stat", args)
	if err != nil {
		return err
	}
	q, err := openRead(dir)
	if err != nil {
		return err
	}
	defer q.Close()
	st := q.Stats()
	if st.ReadPos.Offset < 0 {
		// Stats does no I/O; one index read finds it.
		if pos, err := q.Position(st.ReadSeq); err == nil {
			st.ReadPos = pos
		}
	}
	kind := detectKind(q)
	r := statReport{Queue: dir, Records: kind.String(), Depth: st.Depth, RetainedRecords: int64(st.WriteSeq - st.FirstSeq),
		FirstSeq: st.FirstSeq, ReadSeq: st.ReadSeq, WriteSeq: st.WriteSeq, ReadPos: position(st.ReadPos), WritePos: position(st.WritePos),
		DiskBytes: st.DiskBytes, FreeBytes: freeBytes(dir), Segments: []fileInfo{}, BadFiles: []badFile{}}
	now := time.Now()
	if st.Depth > 0 {
		// The record at the read cursor may be damaged: the lag is that of
		// the oldest one a consumer will get.
		r.Oldest, r.LagSeconds = oldestUnacked(q, st.ReadSeq, st.WriteSeq, now)
	}
	r.Topic = isTopic(dir)
	for _, name := range q.Cursors() {
		if name == "" {
			continue // the queue's own, reported above
		}
		c, err := q.Cursor(name, diskqueue.FromNext()) // it exists: opened as it is
		if err != nil {
			return err
		}
		cs := c.Stats()
		cr := cursorReport{Name: name, ReadSeq: cs.ReadSeq, Depth: cs.Depth, InFlight: cs.InFlight}
		if cs.Depth > 0 {
			cr.Oldest, cr.LagSeconds = oldestUnacked(q, cs.ReadSeq, st.WriteSeq, now)
		}
		if !r.Topic {
			r.Cursors = append(r.Cursors, cr)
			continue
		}
		ch := channelReport{cursorReport: cr}
		if ch.Deferred, err = timerDepth(dir, name); err != nil {
			ch.DeferredError = describe(err)
		}
		r.Channels = append(r.Channels, ch)
	}
	if logs, err := segmentLogs(dir); err == nil {
		r.Segments = append(r.Segments, logs...)
	}
	if bad, err := listBad(dir); err == nil {
		r.BadFiles = append(r.BadFiles, bad...)
	}
	// With no cursor of its own, the log's own figures would count from
	// the oldest record retained: its readers' say what waits.
	_, err = os.Stat(filepath.Join(dir, "cursor"))
	var readers *readerSummary
	if err != nil && (r.Topic || len(r.Cursors) > 0) {
		s := summarizeReaders(&r)
		s.apply(&r)
		readers = &s
	}
	if format == "json" {
		return writeJSON(e.stdout, r)
	}
	out := e.stdout
	switch {
	case r.Topic:
		fmt.Fprintf(out, "topic      %s\n", dir)
		fmt.Fprintf(out, "note       a topic's directory: one log read by the channels below; depth and lag here are the largest of the channels' below\n")
	case readers != nil:
		fmt.Fprintf(out, "queue      %s\n", dir)
		fmt.Fprintf(out, "note       no cursor of its own (a log read through named cursors, below): depth and lag here are the largest of the cursors' below\n")
	default:
		fmt.Fprintf(out, "queue      %s\n", dir)
	}
	fmt.Fprintf(out, "records    %s\n", describeKind(kind))
	if readers != nil {
		readers.print(out)
		fmt.Fprintf(out, "writePos   seq %d  (segment %d offset %d)\n", st.WriteSeq, st.WritePos.Segment, st.WritePos.Offset)
		readers.printRetained(out, st.FirstSeq, st.WriteSeq)
	} else {
		printOwnCursor(out, st, r)
	}
	printDisk(out, r)
	return nil
}

// printOwnCursor writes stat's lines about a queue's own cursor: what
// waits and where it reads.
func printOwnCursor(out io.Writer, st diskqueue.Stats, r statReport) {
	fmt.Fprintf(out, "depth      %d records not acknowledged\n", st.Depth)
	switch {
	case st.Depth == 0:
		fmt.Fprintf(out, "lag        0 (nothing waiting)\n")
	case r.Oldest == nil:
		fmt.Fprintf(out, "lag        unknown: no record from seq %d on checks out ('spillq verify')\n", st.ReadSeq)
	default:
		fmt.Fprintf(out, "lag        %s (oldest unacknowledged record: seq %d, stored %s)\n",
			time.Duration(r.LagSeconds*float64(time.Second)).Round(time.Millisecond), r.Oldest.Seq, r.Oldest.Time.Format(time.RFC3339Nano))
	}
	fmt.Fprintf(out, "readPos    seq %d  (segment %d offset %d)\n", st.ReadSeq, st.ReadPos.Segment, st.ReadPos.Offset)
	fmt.Fprintf(out, "writePos   seq %d  (segment %d offset %d)\n", st.WriteSeq, st.WritePos.Segment, st.WritePos.Offset)
	if st.WriteSeq > st.FirstSeq {
		// On disk and acknowledged: below the read position, or past it
		// out of order. They stay until all of their segment is
		// acknowledged, or for as long as retention keeps them.
		acked := int64(st.WriteSeq-st.FirstSeq) - st.Depth
		fmt.Fprintf(out, "on disk    seqs %d..%d: %d acknowledged (kept until all of their segment is, or by retention), %d not\n", st.FirstSeq, st.WriteSeq-1, acked, st.Depth)
	} else {
		fmt.Fprintf(out, "on disk    no records\n")
	}
}

// printDisk writes stat's lines about the files and the named cursors or
// channels.
func printDisk(out io.Writer, r statReport) {
	fmt.Fprintf(out, "disk       %d bytes in %d segment(s)", r.DiskBytes, len(r.Segments))
	if r.FreeBytes >= 0 {
		fmt.Fprintf(out, "; %d bytes free on its file system", r.FreeBytes)
	}
	fmt.Fprintln(out)
	for _, l := range r.Segments {
		fmt.Fprintf(out, "  %s  %d bytes\n", l.Name, l.Bytes)
	}
	fmt.Fprintf(out, "bad files  %s\n", badSummary(r.BadFiles))
	for _, b := range r.BadFiles {
		fmt.Fprintf(out, "  %s\n", badLine(b))
	}
	if len(r.Cursors) > 0 {
		fmt.Fprintf(out, "cursors    %d named\n", len(r.Cursors))
		for _, c := range r.Cursors {
			fmt.Fprintf(out, "  %s\n", c.line())
		}
	}
	if r.Topic {
		fmt.Fprintf(out, "channels   %d\n", len(r.Channels))
		for _, c := range r.Channels {
			deferred := strconv.FormatInt(c.Deferred, 10)
			if c.DeferredError != "" {
				deferred = "unknown (" + c.DeferredError + ")"
			}
			fmt.Fprintf(out, "  %s  in flight %d  deferred %s\n", c.line(), c.InFlight, deferred)
		}
		if len(r.Channels) > 0 {
			fmt.Fprint(out, `  depth: records not finished, the channel's lag in records; lag: the age of the oldest of them
  in flight: handed out and not acknowledged, as this read-only view sees it: none (a running
    service's deliveries count in depth; a channel that closed cleanly moved them to deferred)
  deferred: messages in its timer store (channels/NAME): delayed or requeued with a delay, and
    what it held in memory when it last closed
`)
		}
	}
}

// line is a named cursor's line in stat's text.
func (c cursorReport) line() string {
	lag := "0"
	if c.Oldest != nil {
		lag = time.Duration(c.LagSeconds * float64(time.Second)).Round(time.Millisecond).String()
	}
	return fmt.Sprintf("%s  read seq %d  depth %d  lag %s", c.Name, c.ReadSeq, c.Depth, lag)
}

// verifyReport is verify's answer; its JSON form is verify -format json.
type verifyReport struct {
	Queue   string `json:"queue"`
	OK      bool   `json:"ok"`
	Records uint64 `json:"records_checked"`
	// Removed is the seqs whose records compaction removed (not damage).
	Removed  uint64 `json:"records_compacted"`
	Segments int    `json:"segments"`
	Bytes    int64  `json:"bytes"`
	FirstSeq uint64 `json:"first_seq"`
	WriteSeq uint64 `json:"write_seq"`
	ReadSeq  uint64 `json:"read_seq"`
	// PendingTail: bytes after the last record of the last segment (a
	// write in progress, or a torn one the next Open cuts); not a problem.
	PendingTail int64           `json:"pending_tail_bytes"`
	Problems    []problemReport `json:"problems"`
	BadFiles    []badFile       `json:"bad_files"`
}

type problemReport struct {
	File         string `json:"file"`
	Offset       int64  `json:"offset"`
	Seq          uint64 `json:"seq"`
	Error        string `json:"error"`
	Damage       bool   `json:"damage"` // damaged records readers skip (they can be set aside and acknowledged)
	BadFile      string `json:"bad_file,omitempty"`
	Acknowledged bool   `json:"acknowledged"`
}

// check runs Verify on dir and classifies its problems against the .bad
// files there; open counts the problems not acknowledged.
func check(dir string) (verifyReport, []problemState, int, error) {
	rep, err := diskqueue.Verify(dir)
	if err != nil {
		return verifyReport{}, nil, 0, err
	}
	bad, err := listBad(dir)
	if err != nil {
		return verifyReport{}, nil, 0, err
	}
	states, open := classify(rep.Problems, bad)
	r := verifyReport{Queue: dir, OK: open == 0, Records: rep.Records, Removed: rep.Removed, Segments: rep.Segments, Bytes: rep.Bytes,
		FirstSeq: rep.FirstSeq, WriteSeq: rep.WriteSeq, ReadSeq: rep.ReadSeq, PendingTail: rep.PendingTail, Problems: []problemReport{}, BadFiles: []badFile{}}
	r.BadFiles = append(r.BadFiles, bad...)
	for _, s := range states {
		r.Problems = append(r.Problems, problemReport{File: s.File, Offset: s.Offset, Seq: s.Seq, Error: describe(s.Err),
			Damage: isDamage(s.Problem), BadFile: s.BadFile, Acknowledged: s.Acknowledged})
	}
	return r, states, open, nil
}

func cmdVerify(e *env, args []string) error {
	dir, format, err := dirAndFormat(e, "verify", args)
	if err != nil {
		return err
	}
	if err := checkQueue(dir); err != nil {
		return err
	}
	r, states, open, err := check(dir)
	if err != nil {
		return err
	}
	if format == "json" {
		if err := writeJSON(e.stdout, r); err != nil {
			return err
		}
	} else {
		out := e.stdout
		fmt.Fprintf(out, "checked %d records in %d segment(s), %d bytes; %s, read cursor %d\n",
			r.Records, r.Segments, r.Bytes, seqRange(r.FirstSeq, r.WriteSeq), r.ReadSeq)
		if r.Removed > 0 {
			fmt.Fprintf(out, "%d seq(s) name records compaction removed (not damage)\n", r.Removed)
		}
		printProblems(out, states)
		if r.PendingTail > 0 {
			fmt.Fprintf(out, "note: %d bytes after the last record: a write in progress, or a torn write left by a crash (no Put returned for it; the next Open cuts it off)\n", r.PendingTail)
		}
		fmt.Fprintf(out, "bad files %s\n", badSummary(r.BadFiles))
		for _, b := range r.BadFiles {
			fmt.Fprintf(out, "  %s\n", badLine(b))
		}
		if open == 0 {
			fmt.Fprintln(out, "ok")
		} else {
			fmt.Fprintf(out, "%d problem(s); 'spillq repair' cuts a torn tail, rebuilds indexes and sets damage aside for 'spillq repair -ack-bad' to acknowledge\n", open)
		}
	}
	if open > 0 {
		return errProblems
	}
	return nil
}

func seqRange(first, write uint64) string {
	if write <= first {
		return "no records"
	}
	return fmt.Sprintf("seqs %d..%d", first, write-1)
}

func printProblems(out io.Writer, states []problemState) {
	for _, s := range states {
		switch {
		case s.Acknowledged:
			fmt.Fprintf(out, "acknowledged %s (set aside in %s)\n", describe(errors.New(s.String())), s.BadFile)
		case s.BadFile != "":
			fmt.Fprintf(out, "PROBLEM %s (set aside in %s, not acknowledged)\n", describe(errors.New(s.String())), s.BadFile)
		default:
			fmt.Fprintf(out, "PROBLEM %s\n", describe(errors.New(s.String())))
		}
	}
}

func cmdRepair(e *env, args []string) error {
	fs := newFlags("repair")
	ack := fs.Bool("ack-bad", false, "acknowledge the damage already set aside in .bad files (those present when repair starts), after you have inspected them: they become NAME.acked.bad and verify stops reporting that damage")
	pos, err := parseArgs(e, fs, args, 1)
	if err != nil {
		return err
	}
	dir, out := pos[0], e.stdout
	// Open repairs what it finds and logs each action: show those lines.
	logger := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelWarn, ReplaceAttr: dropTime}))
	q, err := openRepair(dir, logger)
	if err != nil {
		return err
	}
	// The queue stays open, and so locked, while damage is copied aside and
	// acknowledged, so no service writes meanwhile.
	defer q.Close()
	// Open recovers the last segment; the sealed ones' indexes are checked
	// on first use, so use them all now.
	if _, err := q.RebuildIndexes(context.Background()); err != nil {
		return err
	}
	known, err := listBad(dir)
	if err != nil {
		return err
	}
	_, states, _, err := check(dir)
	if err != nil {
		return err
	}
	for _, s := range states {
		if !isDamage(s.Problem) || s.BadFile != "" {
			continue
		}
		name, err := setAside(dir, s.Problem)
		if err != nil {
			return fmt.Errorf("set aside %s offset %d: %w", s.File, s.Offset, err)
		}
		fmt.Fprintf(out, "set aside %s offset %d (seq %d): %d damaged bytes copied to %s\n", s.File, s.Offset, s.Seq, s.End-s.Offset, name)
	}
	if *ack {
		for _, b := range known {
			if strings.HasSuffix(b.Name, ackedSuffix) {
				continue
			}
			to, removed, err := acknowledge(dir, b)
			if err != nil {
				return fmt.Errorf("acknowledge: %w", err)
			}
			if removed {
				fmt.Fprintf(out, "removed %s: a second copy of the acknowledged %s\n", b.Name, to)
			} else {
				fmt.Fprintf(out, "acknowledged %s: now %s\n", b.Name, to)
			}
		}
	}
	r, states, _, err := check(dir)
	if err != nil {
		return err
	}
	if err := q.Close(); err != nil {
		return err
	}
	printProblems(out, states)
	unacked, other := 0, 0
	for _, s := range states {
		switch {
		case s.Acknowledged:
		case s.BadFile != "":
			unacked++
		default:
			other++
		}
	}
	switch {
	case other > 0:
		fmt.Fprintf(out, "%d problem(s) repair cannot fix remain\n", other)
		return errProblems
	case unacked > 0:
		fmt.Fprintf(out, "repaired: %d records in %d segment(s) check out; %d damaged region(s) are set aside in .bad files and skipped by readers. Inspect them, then run 'spillq repair -ack-bad %s': verify reports them until then\n",
			r.Records, r.Segments, unacked, dir)
	default:
		fmt.Fprintf(out, "repaired: %d records in %d segment(s) check out\n", r.Records, r.Segments)
	}
	return nil
}

func dropTime(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}
