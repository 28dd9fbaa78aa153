package diskqueue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// FuzzDecodeRecord: never panics, and whatever decodes encodes back to the
// same bytes.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(appendRecord(nil, 0, 0, 0, nil))
	f.Add(appendRecord(nil, 0, 1, 2, []byte("hello")))
	f.Add(appendRecord(nil, flagSnappy, 1<<40, -1, bytes.Repeat([]byte{0xAB}, 300)))
	f.Add([]byte{0, 0, 0, 21})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, body, n, err := decodeRecord(b, 1<<16)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, errShortFrame) {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		again := appendRecord(nil, h.flags, h.seq, h.ts, body)
		if !bytes.Equal(again, b[:n]) {
			t.Fatalf("re-encoding differs:\n got %x\nwant %x", again, b[:n])
		}
	})
}

// FuzzRecover: a scan over arbitrary bytes after a valid prefix returns the
// valid records, then stops with nil, errShortFrame or ErrCorrupt, and never
// reports more records than the bytes hold.
func FuzzRecover(f *testing.F) {
	var prefix []byte
	for i := uint64(0); i < 3; i++ {
		prefix = appendRecord(prefix, 0, i, int64(i), []byte("payload"))
	}
	f.Add([]byte{})
	f.Add(make([]byte, 40))
	f.Add(appendRecord(nil, 0, 3, 3, []byte("next"))[:20])
	f.Add(appendRecord(nil, 0, 3, 3, []byte("next")))
	f.Add(appendRecord(nil, 0, 9, 3, []byte("wrong seq")))
	f.Fuzz(func(t *testing.T, tail []byte) {
		data := append(append([]byte(nil), prefix...), tail...)
		sc := newScanner(bytes.NewReader(data), 0, 0, int64(len(data)))
		n := 0
		for sc.Next() {
			off, h, size := sc.Record()
			if h.seq != uint64(n) || off+int64(size) > int64(len(data)) {
				t.Fatalf("record %d: seq %d at %d+%d", n, h.seq, off, size)
			}
			n++
		}
		if n < 3 {
			t.Fatalf("valid prefix lost: %d records", n)
		}
		if int64(n)*recordHeaderSize > int64(len(data)) {
			t.Fatalf("%d records from %d bytes", n, len(data))
		}
		if err := sc.Err(); err != nil && !errors.Is(err, ErrCorrupt) && !errors.Is(err, errShortFrame) {
			t.Fatalf("unexpected error: %v", err)
		}
		if sc.Err() == nil && sc.Offset() != int64(len(data)) {
			t.Fatalf("clean end at %d of %d", sc.Offset(), len(data))
		}
	})
}

// FuzzCursor: the cursor reader never panics and only accepts slots whose
// checksum holds.
func FuzzCursor(f *testing.F) {
	a := encodeCursorSlot(cursorState{gen: 1, readSeq: 5})
	b := encodeCursorSlot(cursorState{gen: 2, readSeq: 9})
	f.Add(append(append([]byte(nil), a...), b...))
	f.Add(a)
	f.Add([]byte("SQCR"))
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := decodeCursorFile(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("unexpected error: %v", err)
			}
			return
		}
		// The CRC covers the first 28 bytes of a slot; the padding after it
		// carries nothing.
		slot := encodeCursorSlot(st)[:28]
		if !bytes.Contains(data, slot) {
			t.Fatalf("accepted state %+v is not a slot in the input", st)
		}
	})
}

// FuzzTimeIndex: the time-index reader never panics, and what it accepts
// is sorted and inside the segment.
func FuzzTimeIndex(f *testing.F) {
	b := appendFileHeader(nil, magicTimeIndex, 10)
	b = appendTimeEntry(b, 1, 10)
	b = appendTimeEntry(b, 3, 12)
	f.Add(b)
	f.Add(b[:20])
	f.Add(appendFileHeader(nil, magicIndex, 10))
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := decodeTimeIndex(data, 10)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("unexpected error: %v", err)
			}
			return
		}
		for i, e := range entries {
			if e.seq < 10 || (i > 0 && (e.seq <= entries[i-1].seq || e.maxTime < entries[i-1].maxTime)) {
				t.Fatalf("accepted bad entry %d: %+v", i, e)
			}
		}
	})
}

// FuzzOpenTail: arbitrary bytes appended to the last segment, and arbitrary
// bytes as its index, never make Open panic or serve a record that was not
// put; the records put stay readable.
func FuzzOpenTail(f *testing.F) {
	f.Add([]byte{}, []byte{})
	f.Add(make([]byte, 30), []byte{0, 0, 0, 16})
	f.Add(appendRecord(nil, 0, 5, 5, []byte("x")), []byte{0xff, 0xff, 0xff, 0xff})
	f.Add(appendRecord(nil, 0, 3, 5, []byte("forged seq 3")), []byte{})
	f.Fuzz(func(t *testing.T, tail, index []byte) {
		dir := t.TempDir()
		q, err := Open(dir, Options{NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		want := [][]byte{[]byte("zero"), []byte("one"), []byte("two")}
		for _, b := range want {
			if err := q.Put(t.Context(), b); err != nil {
				t.Fatal(err)
			}
		}
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		logName := filepath.Join(dir, segmentName(0, logSuffix))
		lf, err := os.OpenFile(logName, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		lf.Write(tail)
		lf.Close()
		idx := append(appendFileHeader(nil, magicIndex, 0), index...)
		if err := os.WriteFile(filepath.Join(dir, segmentName(0, indexSuffix)), idx, 0o644); err != nil {
			t.Fatal(err)
		}
		q, err = Open(dir, Options{NoSync: true})
		if err != nil {
			if errors.Is(err, ErrCorrupt) {
				return
			}
			t.Fatal(err)
		}
		defer q.Close()
		for i, b := range want {
			rec, err := q.ReadAt(uint64(i))
			if err != nil || !bytes.Equal(rec.Body, b) {
				t.Fatalf("ReadAt(%d): got %q, %v; want %q", i, rec.Body, err, b)
			}
		}
		// Anything past the three records must be a record someone encoded
		// with the next seq: the tail is the only source of extra records.
		for seq := uint64(3); ; seq++ {
			rec, err := q.ReadAt(seq)
			if err != nil {
				break
			}
			if !bytes.Contains(tail, rec.Body) {
				t.Fatalf("ReadAt(%d) served %q, not in the appended bytes", seq, rec.Body)
			}
		}
	})
}

// FuzzAckFile feeds arbitrary bytes to the acknowledgement file's decoder
// and bitmap: decoding never panics, and the bitmap's queries agree with a
// bit-by-bit reading of the same bytes.
func FuzzAckFile(f *testing.F) {
	f.Add(encodeAckHeader(0, 0, 0), uint64(0), uint64(8))
	f.Add(append(encodeAckHeader(7, 2048, 0), 0xff, 0x0f, 0x80), uint64(3), uint64(20))
	f.Add(encodeAckHeader(9, 9, ackGone), uint64(0), uint64(1))
	f.Add([]byte("SQAK\x02"), uint64(1), uint64(2))
	f.Fuzz(func(t *testing.T, b []byte, from, to uint64) {
		if _, _, err := decodeAckHeader(b, 7); err != nil {
			return
		}
		capacity := uint64(max(len(b)-ackHeaderSize, 0)) * 8
		a := memAckFile("fuzz", 7, capacity, b)
		from, to = from%(capacity+1), to%(capacity+1)
		var want int64
		firstClear := to
		for i := from; i < to; i++ {
			set, err := a.isSet(i)
			if err != nil {
				t.Fatal(err)
			}
			if set {
				want++
			} else if firstClear == to {
				firstClear = i
			}
		}
		if got, err := a.countSet(from, to); err != nil || (from < to && got != want) {
			t.Fatalf("countSet(%d, %d) = %d, %v; bit by bit %d", from, to, got, err, want)
		}
		if from < to {
			if got, err := a.firstClear(from, to); err != nil || got != firstClear {
				t.Fatalf("firstClear(%d, %d) = %d, %v; bit by bit %d", from, to, got, err, firstClear)
			}
		}
	})
}

// FuzzCompactMarker: the compaction marker's decoder never panics, fails
// only with ErrCorrupt or ErrUnsupportedVersion, and what it accepts
// encodes back to the same bytes.
func FuzzCompactMarker(f *testing.F) {
	good := encodeCompactMarker(compactMarker{base: 7, end: 19, logBytes: 300, indexBytes: compactedIndexBytes(12), timeBytes: 48})
	f.Add(good)
	f.Add(good[:20])
	f.Add([]byte("SQCM\x02"))
	flipped := bytes.Clone(good)
	flipped[30] ^= 1
	f.Add(flipped)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeCompactMarker(b, 7)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupportedVersion) {
				t.Fatalf("unexpected error: %v", err)
			}
			return
		}
		if !bytes.Equal(encodeCompactMarker(m), b) {
			t.Fatalf("accepted marker %+v does not encode back to the input", m)
		}
	})
}

// FuzzCompactedIndex: arbitrary bytes as a compacted segment's index
// entries never make Open, ReadAt, Scan or a cursor panic or serve a body
// that was not put at that seq. With the index's checksum left as it was
// (fix false), the index is rebuilt from the log and every answer is
// exact. With it fixed to match the bytes (an index wrong but consistent,
// as a writer's bug would leave it), ReadAt may believe it, but a cursor
// reading from the segment's start still delivers exactly the records
// kept: the log's frames, each checked, are the last word.
func FuzzCompactedIndex(f *testing.F) {
	f.Add([]byte{}, false)
	f.Add([]byte{0x80, 0, 0, 0x10, 0, 0, 0, 0x10}, true)
	f.Add(bytes.Repeat([]byte{0xff}, 64), true)
	f.Add(bytes.Repeat([]byte{0x80, 0, 0, 0x10}, 16), true)
	f.Fuzz(func(t *testing.T, entries []byte, fix bool) {
		dir := t.TempDir()
		l := compactFixture(t, dir, nil, 24, Options{NoSync: true, MaxSegmentBytes: 400})
		seg := sealedSegs(l)[0]
		kept := func(seq uint64) bool { return seq < seg.Base || seq >= seg.End || seq%3 != 1 }
		if _, err := l.Compact(t.Context(), seg.Base, func(rec Record) bool { return kept(rec.Seq) }); err != nil {
			t.Fatal(err)
		}
		l.Close()
		name := filepath.Join(dir, segmentName(seg.Base, indexSuffix))
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		orig := bytes.Clone(b)
		copy(b[fileHeaderSize:len(b)-indexChecksumSize], entries)
		if fix {
			b = appendIndexChecksum(b[:len(b)-indexChecksumSize])
		}
		exact := !fix || bytes.Equal(b, orig)
		if err := os.WriteFile(name, b, 0o644); err != nil {
			t.Fatal(err)
		}
		l, err = OpenLog(dir, Options{NoSync: true, MaxSegmentBytes: 400})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		const n = 24
		for seq := uint64(0); seq < n; seq++ {
			rec, err := l.ReadAt(seq)
			switch {
			case err == nil && (!kept(seq) || !bytes.Equal(rec.Body, compactTestBody(seq))):
				t.Fatalf("ReadAt(%d) served %q", seq, rec.Body)
			case err != nil && !errors.Is(err, ErrCompacted) && !errors.Is(err, ErrCorrupt):
				t.Fatalf("ReadAt(%d): %v", seq, err)
			case exact && kept(seq) != (err == nil):
				t.Fatalf("ReadAt(%d) with the index rebuilt: %v", seq, err)
			}
		}
		for from := uint64(0); from <= seg.End; from++ {
			next := from
			for rec, err := range l.Scan(from, n) {
				if err != nil {
					if !errors.Is(err, ErrCorrupt) || exact {
						t.Fatalf("Scan(%d): %v", from, err)
					}
					continue
				}
				if rec.Seq < next || !kept(rec.Seq) || !bytes.Equal(rec.Body, compactTestBody(rec.Seq)) {
					t.Fatalf("Scan(%d) yields %d %q", from, rec.Seq, rec.Body)
				}
				for s := next; exact && s < rec.Seq; s++ {
					if kept(s) {
						t.Fatalf("Scan(%d) skips record %d", from, s)
					}
				}
				next = rec.Seq + 1
			}
		}
		c, err := l.Cursor("c", FromOldest())
		if err != nil {
			t.Fatal(err)
		}
		done, cancel := context.WithCancel(t.Context())
		cancel()
		var got []uint64
		for {
			rec, err := c.Read(done)
			if err != nil {
				break
			}
			if !bytes.Equal(rec.Body, compactTestBody(rec.Seq)) {
				t.Fatalf("Read: %d %q", rec.Seq, rec.Body)
			}
			got = append(got, rec.Seq)
		}
		var want []uint64
		for seq := uint64(0); seq < n; seq++ {
			if kept(seq) {
				want = append(want, seq)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("the cursor delivers %v, want %v", got, want)
		}
	})
}
