package diskqueue

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
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
