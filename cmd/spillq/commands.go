package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

var errUsage = errors.New("bad usage")

func usageErr(format string, a ...any) error {
	return fmt.Errorf("%w: %s", errUsage, fmt.Sprintf(format, a...))
}

// parse parses flags and returns the positional arguments, which must
// number exactly n.
func parse(fs *flag.FlagSet, args []string, n int) ([]string, error) {
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		return nil, usageErr("%v", err)
	}
	if fs.NArg() != n {
		return nil, usageErr("want %d argument(s), got %d", n, fs.NArg())
	}
	return fs.Args(), nil
}

// dirOnly parses the arguments of a command that takes no flags and one
// directory.
func dirOnly(name string, args []string) (string, error) {
	pos, err := parse(flag.NewFlagSet(name, flag.ContinueOnError), args, 1)
	if err != nil {
		return "", err
	}
	return pos[0], nil
}

// printer writes records in the chosen format.
type printer struct {
	w       io.Writer
	format  string
	channel bool
}

func (p *printer) flags(fs *flag.FlagSet) {
	fs.StringVar(&p.format, "format", "text", "output format: text, hex or json")
	fs.BoolVar(&p.channel, "channel", false, "records are channel messages (as spillq.Open stores them)")
}

// parse parses flags for a command that prints records, and checks the
// chosen format.
func (p *printer) parse(fs *flag.FlagSet, args []string, n int) ([]string, error) {
	pos, err := parse(fs, args, n)
	if err != nil {
		return nil, err
	}
	return pos, p.check()
}

func (p *printer) check() error {
	switch p.format {
	case "text", "hex", "json":
		return nil
	}
	return usageErr("-format %q: want text, hex or json", p.format)
}

func (p *printer) print(rec diskqueue.Record) error {
	body := rec.Body
	var msg *channel.Message
	if p.channel {
		m, err := channel.UnmarshalMessage(rec.Body)
		if err != nil {
			return fmt.Errorf("seq %d: %w", rec.Seq, err)
		}
		msg, body = m, m.Body
	}
	switch p.format {
	case "json":
		out := map[string]any{"seq": rec.Seq, "time": rec.Time.UTC().Format(time.RFC3339Nano)}
		if msg != nil {
			out["id"], out["attempts"], out["put_time"] = msg.ID.String(), msg.Attempts, msg.Timestamp.UTC().Format(time.RFC3339Nano)
		}
		if utf8.Valid(body) {
			out["body"] = string(body)
		} else {
			out["body_base64"] = body
		}
		b, _ := json.Marshal(out)
		_, err := fmt.Fprintf(p.w, "%s\n", b)
		return err
	case "hex":
		_, err := fmt.Fprintf(p.w, "seq %d  %s  %d bytes\n%s", rec.Seq, rec.Time.UTC().Format(time.RFC3339Nano), len(body), hex.Dump(body))
		return err
	}
	prefix := fmt.Sprintf("%d\t%s\t", rec.Seq, rec.Time.UTC().Format(time.RFC3339Nano))
	if msg != nil {
		prefix += fmt.Sprintf("id=%s attempts=%d\t", msg.ID, msg.Attempts)
	}
	_, err := fmt.Fprintf(p.w, "%s%s\n", prefix, strconv.Quote(string(body)))
	return err
}

func cmdStat(args []string, _ io.Reader, out io.Writer) error {
	dir, err := dirOnly("stat", args)
	if err != nil {
		return err
	}
	q, err := diskqueue.OpenReadOnly(dir, diskqueue.Options{})
	if err != nil {
		return err
	}
	defer q.Close()
	st := q.Stats()
	fmt.Fprintf(out, "queue      %s\n", dir)
	fmt.Fprintf(out, "depth      %d records not acknowledged\n", st.Depth)
	fmt.Fprintf(out, "readPos    seq %d  (segment %d offset %d)\n", st.ReadSeq, st.ReadPos.Segment, st.ReadPos.Offset)
	fmt.Fprintf(out, "writePos   seq %d  (segment %d offset %d)\n", st.WriteSeq, st.WritePos.Segment, st.WritePos.Offset)
	fmt.Fprintf(out, "retained   seqs %d..%d (%d already acknowledged, kept for replay)\n", st.FirstSeq, max(st.WriteSeq, 1)-1, st.ReadSeq-st.FirstSeq)
	fmt.Fprintf(out, "disk       %d bytes in %d segment(s)\n", st.DiskBytes, st.Segments)
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	sort.Strings(logs)
	for _, l := range logs {
		if info, err := os.Stat(l); err == nil {
			fmt.Fprintf(out, "  %s  %d bytes\n", filepath.Base(l), info.Size())
		}
	}
	bad, _ := filepath.Glob(filepath.Join(dir, "*.bad"))
	fmt.Fprintf(out, "bad files  %d\n", len(bad))
	for _, b := range bad {
		fmt.Fprintf(out, "  %s\n", filepath.Base(b))
	}
	return nil
}

// startSeq resolves -from / -since against q.
func startSeq(q *diskqueue.Queue, from int64, since string) (uint64, error) {
	if since != "" {
		t, err := time.Parse(time.RFC3339Nano, since)
		if err != nil {
			return 0, usageErr("-since %q: want an RFC 3339 time such as 2026-11-29T15:04:05Z", since)
		}
		return q.SeekTime(t)
	}
	if from < 0 {
		return q.Stats().FirstSeq, nil
	}
	return uint64(from), nil
}

func cmdDump(args []string, _ io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("dump", flag.ContinueOnError)
	from := fs.Int64("from", -1, "first seq (default: the oldest retained)")
	since := fs.String("since", "", "start at the first record at or after this RFC 3339 time")
	limit := fs.Int("limit", 0, "at most this many records (0: all)")
	p := &printer{w: out}
	p.flags(fs)
	pos, err := p.parse(fs, args, 1)
	if err != nil {
		return err
	}
	q, err := diskqueue.OpenReadOnly(pos[0], diskqueue.Options{})
	if err != nil {
		return err
	}
	defer q.Close()
	start, err := startSeq(q, *from, *since)
	if err != nil {
		return err
	}
	n := 0
	for rec, err := range q.Scan(start, math.MaxUint64) {
		if err != nil {
			if errors.Is(err, diskqueue.ErrCorrupt) {
				fmt.Fprintf(out, "# %v\n", err)
				continue
			}
			return err
		}
		if err := p.print(rec); err != nil {
			return err
		}
		if n++; *limit > 0 && n >= *limit {
			break
		}
	}
	return nil
}

func cmdGet(args []string, _ io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("get", flag.ContinueOnError)
	p := &printer{w: out}
	p.flags(fs)
	pos, err := p.parse(fs, args, 2)
	if err != nil {
		return err
	}
	seq, err := strconv.ParseUint(pos[1], 10, 64)
	if err != nil {
		return usageErr("SEQ %q is not a sequence number", pos[1])
	}
	q, err := diskqueue.OpenReadOnly(pos[0], diskqueue.Options{})
	if err != nil {
		return err
	}
	defer q.Close()
	rec, err := q.ReadAt(seq)
	if err != nil {
		return err
	}
	return p.print(rec)
}

func cmdVerify(args []string, _ io.Reader, out io.Writer) error {
	dir, err := dirOnly("verify", args)
	if err != nil {
		return err
	}
	rep, err := diskqueue.Verify(dir)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "checked %d records in %d segment(s), %d bytes; seqs %d..%d, read cursor %d\n",
		rep.Records, rep.Segments, rep.Bytes, rep.FirstSeq, max(rep.WriteSeq, 1)-1, rep.ReadSeq)
	for _, b := range rep.BadFiles {
		fmt.Fprintf(out, "note: quarantined file %s (inspect, then delete by hand)\n", b)
	}
	if rep.PendingTail > 0 {
		fmt.Fprintf(out, "note: %d bytes after the last record: a write in progress, or a torn write left by a crash (no Put returned for it; the next Open cuts it off)\n", rep.PendingTail)
	}
	if rep.OK() {
		fmt.Fprintln(out, "ok")
		return nil
	}
	for _, p := range rep.Problems {
		fmt.Fprintf(out, "PROBLEM %s\n", p)
	}
	fmt.Fprintf(out, "%d problem(s); 'spillq repair' cuts a torn tail, rebuilds indexes and sets damage aside\n", len(rep.Problems))
	return errProblems
}

func cmdRepair(args []string, _ io.Reader, out io.Writer) error {
	dir, err := dirOnly("repair", args)
	if err != nil {
		return err
	}
	if _, err := os.Stat(dir); err != nil {
		return err
	}
	// Open repairs what it finds and logs each action: show those lines.
	logger := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelWarn, ReplaceAttr: dropTime}))
	q, err := diskqueue.Open(dir, diskqueue.Options{Logger: logger})
	if errors.Is(err, diskqueue.ErrLocked) {
		return fmt.Errorf("%w: stop the service using it first", err)
	}
	if err != nil {
		return err
	}
	if err := q.Close(); err != nil {
		return err
	}
	rep, err := diskqueue.Verify(dir)
	if err != nil {
		return err
	}
	if !rep.OK() {
		for _, p := range rep.Problems {
			fmt.Fprintf(out, "PROBLEM %s\n", p)
		}
		fmt.Fprintf(out, "%d problem(s) remain: damaged records are skipped by readers and kept in .bad files\n", len(rep.Problems))
		return errProblems
	}
	fmt.Fprintf(out, "repaired: %d records in %d segment(s) check out\n", rep.Records, rep.Segments)
	return nil
}

func dropTime(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}

func cmdTail(args []string, _ io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("tail", flag.ContinueOnError)
	from := fs.Int64("from", -1, "first seq (default: the next one written)")
	count := fs.Int("count", 0, "stop after this many records (0: follow until interrupted)")
	p := &printer{w: out}
	p.flags(fs)
	pos, err := p.parse(fs, args, 1)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	next := uint64(math.MaxUint64)
	if *from >= 0 {
		next = uint64(*from)
	}
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
		for rec, err := range q.Scan(next, math.MaxUint64) {
			if err != nil {
				if errors.Is(err, diskqueue.ErrNotFound) {
					next = q.Stats().FirstSeq // consumed and deleted meanwhile
					break
				}
				fmt.Fprintf(out, "# %v\n", err)
				next = rec.Seq + 1
				continue
			}
			if err := p.print(rec); err != nil {
				q.Close()
				return err
			}
			next = rec.Seq + 1
			if n++; *count > 0 && n >= *count {
				q.Close()
				return nil
			}
		}
		q.Close()
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func openForWrite(dir string) (*diskqueue.Queue, error) {
	q, err := diskqueue.Open(dir, diskqueue.Options{})
	if errors.Is(err, diskqueue.ErrLocked) {
		return nil, fmt.Errorf("%w: stop the service using it first", err)
	}
	return q, err
}

func cmdPut(args []string, in io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("put", flag.ContinueOnError)
	asChannel := fs.Bool("channel", false, "store lines as channel messages (for a queue opened with spillq.Open)")
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	q, err := openForWrite(pos[0])
	if err != nil {
		return err
	}
	ctx := context.Background()
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), diskqueue.DefaultMaxRecordBytes)
	n := 0
	id := uint64(time.Now().UnixNano())
	for sc.Scan() {
		body := sc.Bytes()
		if *asChannel {
			id++
			body = channel.MarshalMessage(channel.ID(id), time.Now(), body)
		}
		if err := q.Put(ctx, body); err != nil {
			q.Close()
			return fmt.Errorf("line %d: %w", n+1, err)
		}
		n++
	}
	if err := sc.Err(); err != nil {
		q.Close()
		return err
	}
	if err := q.Sync(ctx); err != nil {
		q.Close()
		return err
	}
	if err := q.Close(); err != nil {
		return err
	}
	fmt.Fprintf(out, "put %d records\n", n)
	return nil
}

func cmdDrain(args []string, _ io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("drain", flag.ContinueOnError)
	limit := fs.Int("limit", 0, "at most this many records (0: all)")
	p := &printer{w: out}
	p.flags(fs)
	pos, err := p.parse(fs, args, 1)
	if err != nil {
		return err
	}
	q, err := openForWrite(pos[0])
	if err != nil {
		return err
	}
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
		if err := p.print(rec); err != nil {
			q.Close()
			return err
		}
		if err := q.Ack(rec.Seq); err != nil {
			q.Close()
			return err
		}
		n++
	}
	return q.Close()
}

// cmdImportNSQD copies the unread messages of a go-diskqueue queue (nsqd's
// NAME.diskqueue.meta.dat and NAME.diskqueue.NNNNNN.dat files) into DIR.
// The source is only read.
func cmdImportNSQD(args []string, _ io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet("import-nsqd", flag.ContinueOnError)
	name := fs.String("name", "", "the go-diskqueue name (nsqd: TOPIC or TOPIC:CHANNEL)")
	from := fs.String("from", "", "the directory holding NAME.diskqueue.* files (nsqd's -data-path)")
	asChannel := fs.Bool("channel", false, "store messages as channel messages (for spillq.Open)")
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	if *name == "" || *from == "" {
		return usageErr("-name and -from are required")
	}
	src, err := openNSQDQueue(*from, *name)
	if err != nil {
		return err
	}
	q, err := openForWrite(pos[0])
	if err != nil {
		return err
	}
	ctx := context.Background()
	n := 0
	id := uint64(time.Now().UnixNano())
	err = src.each(func(body []byte) error {
		if *asChannel {
			id++
			body = channel.MarshalMessage(channel.ID(id), time.Now(), body)
		}
		n++
		return q.Put(ctx, body)
	})
	if err == nil {
		err = q.Sync(ctx)
	}
	if cerr := q.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("after %d messages: %w", n, err)
	}
	fmt.Fprintf(out, "imported %d messages from %s (depth recorded there: %d)\n", n, filepath.Join(*from, *name), src.depth)
	return nil
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
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := fmt.Fscanf(f, "%d\n%d,%d\n%d,%d\n", &q.depth, &q.readFile, &q.readPos, &q.writeFile, &q.writePos); err != nil {
		return nil, fmt.Errorf("%s: not a go-diskqueue metadata file: %w", meta, err)
	}
	return q, nil
}

// each calls fn for every unread message. Like go-diskqueue, it trusts the
// data file past a stale writePos (its metadata is synced lazily) and stops
// at the end of the last file.
func (q *nsqdQueue) each(fn func([]byte) error) error {
	for num := q.readFile; num <= q.writeFile; num++ {
		path := filepath.Join(q.dir, fmt.Sprintf("%s.diskqueue.%06d.dat", q.name, num))
		b, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		off := int64(0)
		if num == q.readFile {
			off = q.readPos
		}
		for off+4 <= int64(len(b)) {
			size := int64(int32(binary.BigEndian.Uint32(b[off:])))
			if size < 0 || off+4+size > int64(len(b)) {
				return fmt.Errorf("%s offset %d: message length %d runs past the file", path, off, size)
			}
			if err := fn(b[off+4 : off+4+size]); err != nil {
				return err
			}
			off += 4 + size
		}
	}
	return nil
}
