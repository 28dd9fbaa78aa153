package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// startSeq resolves -from / -since against q.
func startSeq(q *diskqueue.Queue, from int64, since string) (uint64, error) {
	if since != "" {
		t, err := parseSince(since)
		if err != nil {
			return 0, err
		}
		return q.SeekTime(t)
	}
	if from < 0 {
		return q.Stats().FirstSeq, nil
	}
	return uint64(from), nil
}

func cmdDump(e *env, args []string) error {
	fs := newFlags("dump")
	from := fs.Int64("from", -1, "first seq (default: the oldest retained)")
	since := fs.String("since", "", "start at the first record at or after this RFC 3339 time")
	limit := fs.Int("limit", 0, "at most this many records (0: all)")
	p := &printer{w: e.stdout}
	p.flags(fs)
	pos, err := p.parse(e, fs, args, 1)
	if err != nil {
		return err
	}
	q, err := openRead(pos[0])
	if err != nil {
		return err
	}
	defer q.Close()
	start, err := startSeq(q, *from, *since)
	if err != nil {
		return err
	}
	p.kind = p.resolve(q)
	dmg := &damage{w: e.stderr, cmd: "dump"}
	n := 0
	for rec, err := range q.Scan(start, math.MaxUint64) {
		if errors.Is(err, diskqueue.ErrCorrupt) {
			dmg.report(err)
			continue
		}
		if err != nil {
			return err
		}
		bad, err := p.print(rec)
		if err != nil {
			return err
		}
		if bad != nil {
			dmg.report(bad)
		}
		if n++; *limit > 0 && n >= *limit {
			break
		}
	}
	return dmg.result()
}

func cmdGet(e *env, args []string) error {
	fs := newFlags("get")
	p := &printer{w: e.stdout}
	p.flags(fs)
	pos, err := p.parse(e, fs, args, 2)
	if err != nil {
		return err
	}
	seq, err := strconv.ParseUint(pos[1], 10, 64)
	if err != nil {
		return usageErr("SEQ %q is not a sequence number", pos[1])
	}
	q, err := openRead(pos[0])
	if err != nil {
		return err
	}
	defer q.Close()
	rec, err := q.ReadAt(seq)
	if err != nil {
		return err
	}
	p.kind = p.resolve(q)
	bad, err := p.print(rec)
	if err != nil {
		return err
	}
	if bad != nil {
		dmg := &damage{w: e.stderr, cmd: "get"}
		dmg.report(bad)
		return errProblems
	}
	return nil
}

func cmdTail(e *env, args []string) error {
	fs := newFlags("tail")
	from := fs.Int64("from", -1, "first seq (default: the next one written)")
	count := fs.Int("count", 0, "stop after this many records (0: follow until interrupted)")
	p := &printer{w: e.stdout}
	p.flags(fs)
	pos, err := p.parse(e, fs, args, 1)
	if err != nil {
		return err
	}
	if err := checkQueue(pos[0]); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	next := uint64(math.MaxUint64)
	if *from >= 0 {
		next = uint64(*from)
	}
	dmg := &damage{w: e.stderr, cmd: "tail"}
	n := 0
	// A read-only view is a snapshot; look again a few times a second.
	for {
		q, err := diskqueue.OpenReadOnly(pos[0], diskqueue.Options{})
		if err != nil {
			return err
		}
		if next == math.MaxUint64 {
			next = q.Stats().WriteSeq
		}
		if p.kind == kindUnknown {
			p.kind = p.resolve(q) // stays unknown, so raw, until a record exists
		}
		for rec, err := range q.Scan(next, math.MaxUint64) {
			if errors.Is(err, diskqueue.ErrNotFound) {
				next = q.Stats().FirstSeq // consumed and deleted meanwhile
				break
			}
			if errors.Is(err, diskqueue.ErrCorrupt) {
				dmg.report(err)
				next = rec.Seq + 1 // the first damaged seq; the scan goes on past the rest
				continue
			}
			if err != nil {
				// A read that failed (Scan stops there, and yields no seq
				// to go on from): say so rather than start over.
				q.Close()
				return err
			}
			bad, err := p.print(rec)
			if err != nil {
				q.Close()
				return err
			}
			if bad != nil {
				dmg.report(bad)
			}
			next = rec.Seq + 1
			if n++; *count > 0 && n >= *count {
				q.Close()
				return dmg.result()
			}
		}
		q.Close()
		select {
		case <-ctx.Done():
			return dmg.result()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// openWriteKind opens dir for a command that writes records, creating the
// queue only with -create, and settles which kind of record to write. A new
// queue needs the kind said: need names the flags for the message.
func openWriteKind(dir string, create bool, k kindFlags, need string) (*diskqueue.Queue, recordKind, error) {
	if create && willCreate(dir) && k.forced() == kindUnknown {
		return nil, kindUnknown, usageErr("a new queue needs %s", need)
	}
	q, err := openWrite(dir, create, nil)
	if err != nil {
		return nil, kindUnknown, err
	}
	kind, err := writeKind(k, q, dir)
	if err != nil {
		q.Close()
		return nil, kindUnknown, err
	}
	return q, kind, nil
}

// writeKind decides what put and import-nsqd write into q: the -channel or
// -raw flag, else what the queue already holds. A queue with no records
// yet says nothing, and a wrong guess is costly either way (a channel
// drops records that are not envelopes; a raw consumer gets 20 bytes of
// envelope in every body), so then the operator must say.
func writeKind(k kindFlags, q *diskqueue.Queue, dir string) (recordKind, error) {
	held := detectKind(q)
	want := k.forced()
	switch {
	case want == kindUnknown && held == kindUnknown:
		return 0, usageErr("%s holds no records yet to tell what it stores: pass -channel (for a service using spillq.Open) or -raw (diskqueue used directly)", dir)
	case want == kindUnknown:
		return held, nil
	case held != kindUnknown && held != want:
		return 0, fmt.Errorf("%s holds %s, not %s; writing those would break its consumers", dir, describeKind(held), describeKind(want))
	}
	return want, nil
}

func cmdPut(e *env, args []string) error {
	fs := newFlags("put")
	var k kindFlags
	k.registerWrite(fs, "lines")
	create := fs.Bool("create", false, "make a new queue if DIR is missing or empty")
	pos, err := parseArgs(e, fs, args, 1)
	if err != nil {
		return err
	}
	if err := k.check(); err != nil {
		return err
	}
	dir := pos[0]
	q, kind, err := openWriteKind(dir, *create, k, "-channel (for a service using spillq.Open) or -raw (diskqueue used directly)")
	if err != nil {
		return err
	}
	ctx := context.Background()
	sc := bufio.NewScanner(e.stdin)
	sc.Buffer(make([]byte, 64<<10), maxWriteBody)
	n := 0
	id := uint64(time.Now().UnixNano())
	for sc.Scan() {
		body := sc.Bytes()
		if kind == kindChannel {
			id++
			body = channel.MarshalMessage(channel.ID(id), time.Now(), body)
		}
		if err := q.Put(ctx, body); err != nil {
			q.Close()
			return fmt.Errorf("line %d: %w (lines before it are stored)", n+1, err)
		}
		n++
	}
	if err := sc.Err(); err != nil {
		q.Close()
		return fmt.Errorf("after %d lines: %w (those are stored)", n, err)
	}
	if err := q.Sync(ctx); err != nil {
		q.Close()
		return err
	}
	if err := q.Close(); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "put %d records: %s\n", n, describeKind(kind))
	return nil
}

func cmdDrain(e *env, args []string) error {
	// A reader that stops early (head) makes the next write fail: with
	// SIGPIPE the tool died there, and with it ignored the write returns
	// EPIPE, so the record it was writing is not acknowledged and drain
	// says why it stopped. What the pipe held unread was acknowledged as
	// written; the help says to use -limit.
	signal.Ignore(syscall.SIGPIPE)
	fs := newFlags("drain")
	limit := fs.Int("limit", 0, "at most this many records (0: all)")
	p := &printer{w: e.stdout}
	p.flags(fs)
	pos, err := p.parse(e, fs, args, 1)
	if err != nil {
		return err
	}
	q, err := openWrite(pos[0], false, nil)
	if err != nil {
		return err
	}
	p.kind = p.resolve(q)
	dmg := &damage{w: e.stderr, cmd: "drain"}
	done, cancel := context.WithCancel(context.Background())
	cancel() // Read returns what is there, without waiting
	n := 0
	for *limit == 0 || n < *limit {
		rec, err := q.Read(done)
		if errors.Is(err, context.Canceled) {
			break
		}
		if err != nil {
			q.Close()
			return err
		}
		// Acknowledge only once the record is out: at-least-once.
		bad, err := p.print(rec)
		if err != nil {
			q.Close()
			return err
		}
		if bad != nil {
			dmg.report(bad)
		}
		if err := q.Ack(rec.Seq); err != nil {
			q.Close()
			return err
		}
		n++
	}
	if err := q.Close(); err != nil {
		return err
	}
	return dmg.result()
}

// cmdKey lists the records of one message key (channel.PutOptions.Key)
// that the log still holds, oldest first: the key's history, its newest
// version last. It reads the whole log, as the key is in each record's
// envelope and nothing indexes it. The log keeps acknowledged records
// until their segment goes, so on a queue each record says whether it is
// acknowledged (on a topic that takes every channel's cursor, which this
// view of the log does not open).
func cmdKey(e *env, args []string) error {
	fs := newFlags("key")
	p := &printer{w: e.stdout, kind: kindChannel}
	p.flags(fs)
	pos, err := p.parse(e, fs, args, 2)
	if err != nil {
		return err
	}
	key := pos[1]
	q, err := openRead(pos[0])
	if err != nil {
		return err
	}
	defer q.Close()
	var acked uint64
	if !isTopic(pos[0]) {
		p.acked = q.Acknowledged
	}
	var found, newest uint64
	var newestID channel.ID
	for rec, err := range q.Scan(q.Stats().FirstSeq, math.MaxUint64) {
		if err != nil {
			if errors.Is(err, diskqueue.ErrCorrupt) {
				continue // reported by verify; it holds no key we can read
			}
			return err
		}
		m, err := channel.UnmarshalMessage(rec.Body)
		if err != nil || string(m.Key) != key {
			continue
		}
		if _, err := p.print(rec); err != nil {
			return err
		}
		found++
		if p.acked != nil && p.acked(rec.Seq) {
			acked++
		}
		if m.ID >= newestID { // by ID: a record stored again at Close can come after a newer one
			newest, newestID = rec.Seq, m.ID
		}
	}
	if p.format != "text" {
		return nil
	}
	if found == 0 {
		fmt.Fprintf(e.stderr, "key %q: no record in the log\n", key)
		return errProblems
	}
	var of string
	if p.acked != nil {
		of = fmt.Sprintf(" (%d acknowledged, %d pending)", acked, found-acked)
	}
	fmt.Fprintf(e.stderr, "key %q: %d record(s) in the log%s, the newest at seq %d\n", key, found, of, newest)
	return nil
}
