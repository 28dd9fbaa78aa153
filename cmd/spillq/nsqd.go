package main

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	nsq "github.com/nsqio/go-nsq"

	"github.com/spillq/spillq/channel"
)

// cmdImportNSQD copies the unread messages of a go-diskqueue queue (nsqd's
// NAME.diskqueue.meta.dat and NAME.diskqueue.NNNNNN.dat files) into DIR.
// The source is only read, twice: a first pass decodes all of it, so a
// source that is not what the flags say fails without a partial import,
// and the second writes, holding one data file in memory at a time.
// nsqd takes no lock on its files: stop it first.
func cmdImportNSQD(e *env, args []string) error {
	fs := newFlags("import-nsqd")
	name := fs.String("name", "", "the go-diskqueue name (nsqd: TOPIC, or TOPIC:CHANNEL for a channel's backlog)")
	from := fs.String("from", "", "the directory holding NAME.diskqueue.* files (nsqd's -data-path)")
	source := fs.String("source", "nsqd", "what the files hold: nsqd (nsqd's messages: timestamp, attempts, ID, body) or raw (bodies of go-diskqueue used directly)")
	var k kindFlags
	k.registerWrite(fs, "messages")
	create := fs.Bool("create", false, "make a new queue if DIR is missing or empty")
	pos, err := parseArgs(e, fs, args, 1)
	if err != nil {
		return err
	}
	if *name == "" || *from == "" {
		return usageErr("-name and -from are required")
	}
	if *source != "nsqd" && *source != "raw" {
		return usageErr("-source %q: want nsqd or raw", *source)
	}
	if err := k.check(); err != nil {
		return err
	}
	dir := pos[0]
	src, err := openNSQDQueue(*from, *name)
	if err != nil {
		return err
	}
	nsqdFormat := *source == "nsqd"
	total, err := src.each(nsqdFormat, func(m importMsg) error {
		if len(m.body) > maxWriteBody {
			return fmt.Errorf("a %d-byte body, over the %d a queue takes with the default options", len(m.body), maxWriteBody)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w; nothing imported", err)
	}
	q, kind, err := openWriteKind(dir, *create, k, "-channel (for a service using spillq.Open; keeps nsqd's IDs, timestamps and attempts) or -raw (diskqueue used directly; bodies only)")
	if err != nil {
		return err
	}
	ctx := context.Background()
	id := uint64(time.Now().UnixNano())
	n, err := src.each(nsqdFormat, func(m importMsg) error {
		body := m.body
		if kind == kindChannel {
			if !m.hasMeta {
				id++
				m.id, m.ts = channel.ID(id), time.Now()
			}
			var err error
			if body, err = envelope(m); err != nil {
				return err
			}
		}
		return q.Put(ctx, body)
	})
	if err == nil {
		err = q.Sync(ctx)
	}
	if cerr := q.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("after %d of %d messages: %w", n, total, err)
	}
	note := ""
	switch {
	case *source == "nsqd" && kind == kindChannel:
		note = "; nsqd's IDs, timestamps and attempts kept"
	case *source == "nsqd":
		note = "; bodies only: raw records have no room for nsqd's IDs, timestamps and attempts"
	}
	fmt.Fprintf(e.stdout, "imported %d messages from %s (depth recorded there: %d) into %s: %s%s\n",
		n, filepath.Join(*from, *name), src.depth, dir, describeKind(kind), note)
	return nil
}

// importMsg is one message read from a go-diskqueue queue.
type importMsg struct {
	body     []byte
	hasMeta  bool // decoded from nsqd's format: id, ts and attempts are nsqd's
	id       channel.ID
	ts       time.Time
	attempts uint16
}

// maxNSQDSkew bounds how far in the future an nsqd timestamp may lie (the
// nsqd host's clock ahead of this one). A raw body taken for nsqd's format
// decodes to a time far outside: text in its first 8 bytes reads as a time
// after 2043.
const maxNSQDSkew = 24 * time.Hour

// decodeNSQD decodes one record of nsqd's disk queue with go-nsq. nsqd's
// message ID is 16 hex digits of a 64-bit number, which is exactly a
// channel.ID: ID(x).String() gives back the same 16 digits, so the ID
// survives the move unchanged.
func decodeNSQD(b []byte) (importMsg, error) {
	m, err := nsq.DecodeMessage(b)
	if err != nil {
		return importMsg{}, fmt.Errorf("%d bytes, shorter than nsqd's 26-byte message header", len(b))
	}
	var id [8]byte
	if _, err := hex.Decode(id[:], m.ID[:]); err != nil {
		return importMsg{}, fmt.Errorf("message ID %q is not 16 hex digits", m.ID[:])
	}
	ts := time.Unix(0, m.Timestamp)
	if ts.Before(minPutTime) || ts.After(time.Now().Add(maxNSQDSkew)) {
		return importMsg{}, fmt.Errorf("timestamp %d is not a plausible time", m.Timestamp)
	}
	return importMsg{body: m.Body, hasMeta: true, id: channel.ID(binary.BigEndian.Uint64(id[:])), ts: ts, attempts: m.Attempts}, nil
}

// envelope encodes m as a channel message. channel.MarshalMessage writes
// no attempts, so they are set at their offset in the envelope (FORMAT.md,
// "Channel message envelope", bytes 10-11), and the result is decoded again
// so a change of that format fails here rather than in a consumer.
func envelope(m importMsg) ([]byte, error) {
	b := channel.MarshalMessage(m.id, m.ts, m.body)
	binary.BigEndian.PutUint16(b[10:12], m.attempts)
	got, err := channel.UnmarshalMessage(b)
	if err != nil || got.ID != m.id || got.Attempts != m.attempts || !got.Timestamp.Equal(m.ts) || len(got.Body) != len(m.body) {
		return nil, fmt.Errorf("channel message envelope is not the version this tool writes (FORMAT.md): %v", err)
	}
	return b, nil
}

// nsqdQueue is a go-diskqueue queue on disk, read-only.
type nsqdQueue struct {
	dir, name           string
	depth               int64
	readFile, readPos   int64
	writeFile, writePos int64
}

func openNSQDQueue(dir, name string) (*nsqdQueue, error) {
	q := &nsqdQueue{dir: dir, name: name}
	meta := filepath.Join(dir, name+".diskqueue.meta.dat")
	f, err := os.Open(meta)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: no go-diskqueue queue %q there (no %s)", dir, name, filepath.Base(meta))
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := fmt.Fscanf(f, "%d\n%d,%d\n%d,%d\n", &q.depth, &q.readFile, &q.readPos, &q.writeFile, &q.writePos); err != nil {
		return nil, fmt.Errorf("%s: not a go-diskqueue metadata file: %w", meta, err)
	}
	return q, nil
}

// each calls fn for every unread message in order, decoded from nsqd's
// format if nsqdFormat, and returns how many fn accepted. Like
// go-diskqueue, it trusts the data file past a stale writePos (its
// metadata is synced lazily) and stops at the end of the last file.
func (q *nsqdQueue) each(nsqdFormat bool, fn func(importMsg) error) (int, error) {
	n := 0
	for num := q.readFile; num <= q.writeFile; num++ {
		path := filepath.Join(q.dir, fmt.Sprintf("%s.diskqueue.%06d.dat", q.name, num))
		b, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return n, err
		}
		off := int64(0)
		if num == q.readFile {
			off = q.readPos
		}
		for off+4 <= int64(len(b)) {
			size := int64(int32(binary.BigEndian.Uint32(b[off:])))
			if size < 0 || off+4+size > int64(len(b)) {
				return n, fmt.Errorf("%s offset %d: message length %d runs past the file", path, off, size)
			}
			rec := b[off+4 : off+4+size]
			m := importMsg{body: rec}
			if nsqdFormat {
				if m, err = decodeNSQD(rec); err != nil {
					return n, fmt.Errorf("%s offset %d: not nsqd's message format: %v (for files go-diskqueue wrote directly, pass -source raw)", path, off, err)
				}
			}
			if err := fn(m); err != nil {
				return n, fmt.Errorf("%s offset %d: %w", path, off, err)
			}
			n++
			off += 4 + size
		}
	}
	return n, nil
}
