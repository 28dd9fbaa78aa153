package diskqueue

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/spillq/spillq/internal/vfs"
)

// scanItems runs a scanner with a resync policy over log, a segment's log
// file's bytes, and checks what every policy relies on: items follow each
// other with no byte between them, a record decodes where it is said to
// be with the seq it is said to have, a span of damage is resumed at the
// record that comes next or runs to the end and ends the scan. It returns
// the records' seqs and the spans.
func scanItems(t *testing.T, log []byte, gaps bool) ([]uint64, []damageSpan) {
	t.Helper()
	base, compacted, err := decodeSegmentHeader(log, magicLog)
	if err != nil {
		base, compacted = 0, false
	}
	const before = 1 << 20
	size := int64(len(log))
	if size < fileHeaderSize {
		return nil, nil
	}
	sc := newScanner(bytes.NewReader(log), fileHeaderSize, base, size)
	if gaps || compacted {
		sc.allowGaps(base + before)
	}
	sc.resync = &resyncPolicy{before: base + before, maxBody: resyncMaxBody(0)}
	var seqs []uint64
	var spans []damageSpan
	pos, want := int64(fileHeaderSize), base
	ended := false
	for sc.Next() {
		if ended {
			t.Fatalf("an item after damage that was not resumed")
		}
		if d, ok := sc.Damage(); ok {
			if d.from != pos || d.first != want || d.to <= d.from || d.to > size || !isDamage(d.cause) {
				t.Fatalf("span %+v after offset %d seq %d of %d bytes", d, pos, want, size)
			}
			if d.resumed {
				h, _, _, err := decodeRecord(log[d.to:], maxReadBody)
				if err != nil || h.seq != d.next || d.next <= d.first {
					t.Fatalf("span %+v resumed at no record of seq %d: %v", d, d.next, err)
				}
				if sc.gapsBelow == 0 && d.next-d.first-1 > uint64(d.to-d.from)/recordHeaderSize {
					t.Fatalf("span %+v skips more seqs than its bytes hold", d)
				}
			} else {
				if d.to != size || sc.Offset() != d.from {
					t.Fatalf("span %+v not resumed, yet the scan is at %d of %d", d, sc.Offset(), size)
				}
				ended = true
			}
			spans = append(spans, d)
			pos, want = d.to, d.next
			continue
		}
		off, h, n := sc.Record()
		got, _, m, err := decodeRecord(log[off:], maxReadBody)
		if off != pos || err != nil || got != h || m != n || h.seq < want || h.seq != want && sc.gapsBelow == 0 {
			t.Fatalf("record %+v at %d+%d, want offset %d seq %d: %v", h, off, n, pos, want, err)
		}
		seqs = append(seqs, h.seq)
		pos, want = off+int64(n), h.seq+1
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("scan of bytes in memory failed: %v", err)
	}
	if !ended && pos != size {
		t.Fatalf("scan ended at %d of %d bytes", pos, size)
	}
	return seqs, spans
}

// damagedSegments are real segments (the golden files) and copies damaged
// as disks and crashes damage them.
func damagedSegments(t testing.TB) [][]byte {
	var out [][]byte
	for _, name := range []string{"v1/00000000000000000000.log", "v1/00000000000000000004.log", "v2/00000000000000000000.log", "v2/00000000000000000004.log"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	var seg []byte
	seg = appendFileHeader(seg, magicLog, 7)
	var offs []int
	for i := uint64(0); i < 12; i++ {
		offs = append(offs, len(seg))
		seg = appendRecord(seg, 0, 7+i, int64(i), bytes.Repeat([]byte{byte(i)}, int(10+i*7)))
	}
	damage := func(f func(b []byte)) {
		b := bytes.Clone(seg)
		f(b)
		out = append(out, b)
	}
	out = append(out, seg)
	damage(func(b []byte) { b[offs[3]+30] ^= 1 })                             // a body bit: the length says where the next is
	damage(func(b []byte) { copy(b[offs[5]:], []byte{0x7f, 0xff, 0, 9}) })    // the length: only a search finds the next
	damage(func(b []byte) { clear(b[offs[4]:offs[8]]) })                      // zeros in the middle
	damage(func(b []byte) { b[offs[11]+2] ^= 0x40 })                          // the last record
	out = append(out, seg[:offs[9]+11])                                       // torn
	out = append(out, append(bytes.Clone(seg), make([]byte, 8192)...))        // preallocated zeros
	out = append(out, append(bytes.Clone(seg[:offs[6]+5]), seg[offs[7]:]...)) // a record cut short
	return out
}

func TestScannerResumesAfterDamage(t *testing.T) {
	segs := damagedSegments(t)
	clean := segs[4]
	for i, want := range []struct {
		records int
		spans   int
	}{
		{11, 1}, // body bit
		{11, 1}, // length
		{8, 1},  // zeros
		{11, 1}, // the last record: nothing after it
		{9, 1},  // torn
		{12, 1}, // preallocated zeros
		{11, 1}, // cut short
	} {
		seqs, spans := scanItems(t, segs[5+i], false)
		if len(seqs) != want.records || len(spans) != want.spans {
			t.Errorf("case %d: %d records and %d spans, want %d and %d: %+v", i, len(seqs), len(spans), want.records, want.spans, spans)
		}
	}
	if seqs, spans := scanItems(t, clean, false); len(seqs) != 12 || len(spans) != 0 {
		t.Fatalf("clean segment: %d records, %v", len(seqs), spans)
	}
}

// FuzzSegmentScanner: the segment scanner, with its resync, never panics
// on any bytes and its items always fit together (scanItems). Seeded with
// the golden segments and damaged copies of a segment.
func FuzzSegmentScanner(f *testing.F) {
	for _, b := range damagedSegments(f) {
		f.Add(b, false)
	}
	f.Add(appendFileHeader(nil, magicLog, 0), true)
	f.Fuzz(func(t *testing.T, log []byte, gaps bool) {
		scanItems(t, log, gaps)
	})
}

// TestResyncOverDamageReadsLittle: after a damaged record, Verify looks
// for the next good frame at every byte offset. Readers take any record
// length (a log opened with a smaller MaxRecordBytes than it was written
// under reads every record), and with that bound resync read and
// checksummed, at every offset whose bytes looked like a frame, up to the
// rest of the segment: a damaged 8 KiB body of small big-endian integers
// made Verify read gigabytes (11 s; a review found it). Here the body is
// frame headers announcing 2 MiB. Resync bounds a
// try by the configured limit, so Verify reads about the segment once.
func TestResyncOverDamageReadsLittle(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	q := mustOpen(t, dir, Options{})
	if err := q.Put(ctx, []byte("first")); err != nil {
		t.Fatal(err)
	}
	// Bytes that look like frame headers of the next record: a length of
	// 2 MiB (within the rest of the segment) and seq 2.
	var body []byte
	for len(body) < 8<<10 {
		body = binary.BigEndian.AppendUint32(body, 2<<20)
		body = append(body, 0, 0, 0, 0, 0)
		body = binary.BigEndian.AppendUint64(body, 2)
		body = binary.BigEndian.AppendUint64(body, 0)
	}
	if err := q.Put(ctx, body); err != nil {
		t.Fatal(err)
	}
	for range 8 {
		if err := q.Put(ctx, bytes.Repeat([]byte("f"), 1<<20-64)); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	logs, err := filepath.Glob(filepath.Join(dir, "*"+logSuffix))
	if err != nil || len(logs) != 1 {
		t.Fatalf("logs %v, %v", logs, err)
	}
	b, err := os.ReadFile(logs[0])
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(b, body[:64])
	b[i+len(body)-1] ^= 0xff
	if err := os.WriteFile(logs[0], b, 0o644); err != nil {
		t.Fatal(err)
	}
	var read atomic.Int64
	rep, err := verify(dir, Options{FS: countingFS{vfs.OS, &read}})
	if err != nil || len(rep.Problems) == 0 {
		t.Fatalf("Verify: %v, problems %v; want the damage reported", err, rep.Problems)
	}
	if r := read.Load(); r > 4*int64(len(b)) {
		t.Fatalf("Verify read %d bytes of a %d-byte log", r, len(b))
	}
}

// TestResyncFindsALargeRecordAfterDamage: a log written with
// MaxRecordBytes 4 MiB and opened with the default limit (a tool), a
// record's length field damaged and the segment's index gone: the rebuild
// resyncs past the damage, and the 2 MiB record after it must be found,
// not taken into the damage (and so lost when the rebuilt index is
// written), and Verify must report only the damaged record. resync's
// bound, taken from the options of the open, passed over it (a review
// found it).
func TestResyncFindsALargeRecordAfterDamage(t *testing.T) {
	ctx := context.Background()
	for _, rebuild := range []bool{true, false} {
		dir := t.TempDir()
		q := mustOpen(t, dir, Options{MaxRecordBytes: 4 << 20, MaxSegmentBytes: 3 << 20})
		big := bytes.Repeat([]byte("B"), 2<<20)
		for _, b := range [][]byte{[]byte("first"), []byte("second-damaged"), big, []byte("fourth"), bytes.Repeat([]byte("R"), 2<<20), []byte("last")} {
			if err := q.Put(ctx, b); err != nil {
				t.Fatal(err)
			}
		}
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		logs, _ := filepath.Glob(filepath.Join(dir, "*"+logSuffix))
		if len(logs) < 2 {
			t.Fatalf("want 2 segments or more, have %v", logs)
		}
		b, err := os.ReadFile(logs[0])
		if err != nil {
			t.Fatal(err)
		}
		h := bytes.Index(b, []byte("second-damaged")) - recordHeaderSize
		if binary.BigEndian.Uint64(b[h+9:h+17]) != 1 {
			t.Fatal("record 1's header not found")
		}
		binary.BigEndian.PutUint32(b[h:h+4], 0xfffffff0) // its length
		if err := os.WriteFile(logs[0], b, 0o644); err != nil {
			t.Fatal(err)
		}
		if !rebuild {
			rep, err := Verify(dir)
			if err != nil || len(rep.Problems) != 1 || rep.Problems[0].End > int64(h)+100 {
				t.Fatalf("Verify: %v, %+v; want one problem, record 1 alone", err, rep.Problems)
			}
			continue
		}
		if err := os.Remove(logs[0][:len(logs[0])-len(logSuffix)] + indexSuffix); err != nil {
			t.Fatal(err)
		}
		q = mustOpen(t, dir, Options{})
		var got []uint64
		done, cancel := context.WithCancel(ctx)
		cancel()
		for {
			rec, err := q.Read(done)
			if err != nil {
				break
			}
			got = append(got, rec.Seq)
			q.Ack(rec.Seq)
		}
		q.Close()
		if fmt.Sprint(got) != "[0 2 3 4 5]" {
			t.Fatalf("read %v, want [0 2 3 4 5]: the 2 MiB record 2 lost", got)
		}
	}
}

// countingFS counts the bytes its files' ReadAt return.
type countingFS struct {
	fileSystem
	read *atomic.Int64
}

func (c countingFS) OpenFile(name string, flag int, perm fs.FileMode) (file, error) {
	f, err := c.fileSystem.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return countingFile{f, c.read}, nil
}

type countingFile struct {
	file
	read *atomic.Int64
}

func (f countingFile) ReadAt(b []byte, off int64) (int, error) {
	n, err := f.file.ReadAt(b, off)
	f.read.Add(int64(n))
	return n, err
}
