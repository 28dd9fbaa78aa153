package diskqueue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func compactTestBody(seq uint64) []byte {
	return []byte(fmt.Sprintf("body-%05d-%s", seq, bytes.Repeat([]byte{'x'}, int(seq%17))))
}

// compactFixture is a log in dir on fsys (nil: the real one) with n
// records in segments of segBytes, every one but the active sealed.
func compactFixture(t testing.TB, dir string, fsys fileSystem, n int, opts Options) *Log {
	t.Helper()
	if opts.MaxSegmentBytes == 0 {
		opts.MaxSegmentBytes = 1024
	}
	if fsys != nil {
		opts.FS = fsys
	}
	l, err := OpenLog(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < n; i++ {
		if err := l.Put(ctx, compactTestBody(uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	return l
}

func sealedSegs(l *Log) []SegmentInfo {
	var out []SegmentInfo
	for _, s := range l.Segments() {
		if s.Sealed {
			out = append(out, s)
		}
	}
	return out
}

// A reader in a segment when a compaction swaps its files finishes the
// record it is on from the old generation, then goes on in the new one
// from the next seq: no record twice, none lost but those removed, no
// error; the old generation's files are closed once the reader lets go.
func TestCompactReaderKeepsItsGeneration(t *testing.T) {
	mfs := newMemFS()
	l := compactFixture(t, "/q", mfs, 100, Options{})
	defer l.Close()
	target := sealedSegs(l)[0]
	seg, _ := l.segmentFor(target.Base)
	old := seg.files.Load()
	next, stop := iter.Pull2(l.Scan(target.Base, target.End))
	defer stop()
	var got []uint64
	for i := 0; i < 3; i++ {
		rec, err, ok := next()
		if !ok || err != nil {
			t.Fatal(err)
		}
		got = append(got, rec.Seq)
	}
	if _, err := l.Compact(context.Background(), target.Base, func(rec Record) bool { return rec.Seq%2 == 0 }); err != nil {
		t.Fatal(err)
	}
	if seg.files.Load() == old || old.refs.Load() != 1 {
		t.Fatalf("after the swap the old generation has %d holders, want the reader alone", old.refs.Load())
	}
	for {
		rec, err, ok := next()
		if !ok {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(rec.Body, compactTestBody(rec.Seq)) {
			t.Fatalf("seq %d: %q", rec.Seq, rec.Body)
		}
		got = append(got, rec.Seq)
	}
	stop()
	want := []uint64{target.Base, target.Base + 1, target.Base + 2}
	for seq := target.Base + 3; seq < target.End; seq++ {
		if seq%2 == 0 {
			want = append(want, seq)
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("a Scan across the swap yields %v, want %v", got, want)
	}
	if n := old.refs.Load(); n > 0 {
		t.Fatalf("the old generation still has %d holders", n)
	}
	if _, err := old.log.ReadAt(make([]byte, 1), 0); !errors.Is(err, os.ErrClosed) {
		t.Fatalf("the old generation's log is still open: %v", err)
	}
}

// A compacted segment's log and index carry version 2: a build that reads
// only version 1 refuses them (ErrUnsupportedVersion), and the index marks
// each removed record with the offset of the next one kept.
func TestCompactFormat(t *testing.T) {
	dir := t.TempDir()
	l := compactFixture(t, dir, nil, 60, Options{})
	target := sealedSegs(l)[0]
	if _, err := l.Compact(context.Background(), target.Base, func(rec Record) bool { return rec.Seq%3 == 0 }); err != nil {
		t.Fatal(err)
	}
	l.Close()
	logBytes, _ := os.ReadFile(filepath.Join(dir, segmentName(target.Base, logSuffix)))
	indexBytes, _ := os.ReadFile(filepath.Join(dir, segmentName(target.Base, indexSuffix)))
	for _, c := range []struct {
		b     []byte
		magic [4]byte
	}{{logBytes, magicLog}, {indexBytes, magicIndex}} {
		if _, err := decodeFileHeader(c.b, c.magic); !errors.Is(err, ErrUnsupportedVersion) {
			t.Fatalf("a version-1 reader of a compacted %s: %v, want ErrUnsupportedVersion", c.magic, err)
		}
		if _, compacted, err := decodeSegmentHeader(c.b, c.magic); err != nil || !compacted {
			t.Fatalf("decodeSegmentHeader(%s): compacted %v, %v", c.magic, compacted, err)
		}
	}
	count := int64(target.End - target.Base)
	if int64(len(indexBytes)) != compactedIndexBytes(count) || !indexChecksumOK(indexBytes) {
		t.Fatalf("compacted index is %d bytes (checksum ok: %v), want %d: one entry per seq and the checksum", len(indexBytes), indexChecksumOK(indexBytes), compactedIndexBytes(count))
	}
	sc := newScanner(bytes.NewReader(logBytes), fileHeaderSize, target.Base, int64(len(logBytes)))
	sc.allowGaps(target.End)
	offsets := map[uint64]int64{}
	for sc.Next() {
		off, h, _ := sc.Record()
		if h.seq%3 != 0 {
			t.Fatalf("compacted log holds removed seq %d", h.seq)
		}
		offsets[h.seq] = off
	}
	if sc.Err() != nil {
		t.Fatal(sc.Err())
	}
	nextKept := int64(len(logBytes))
	for i := count - 1; i >= 0; i-- {
		seq := target.Base + uint64(i)
		raw, _ := decodeIndexEntry(indexBytes, i)
		off, removed := indexOffset(uint32(raw), true)
		if want, kept := offsets[seq]; kept {
			if removed || off != want {
				t.Fatalf("entry of kept seq %d: %d removed=%v, want %d", seq, off, removed, want)
			}
			nextKept = off
			continue
		}
		if !removed || off != nextKept {
			t.Fatalf("entry of removed seq %d: %d removed=%v, want removed pointing at %d", seq, off, removed, nextKept)
		}
	}
}

// A compacted segment whose indexes are lost gets them rebuilt from its
// log, removed records marked as before.
func TestCompactRebuildIndexes(t *testing.T) {
	dir := t.TempDir()
	l := compactFixture(t, dir, nil, 80, Options{})
	target := sealedSegs(l)[0]
	keep := func(seq uint64) bool { return seq%4 == 1 || seq == target.Base }
	if _, err := l.Compact(context.Background(), target.Base, func(rec Record) bool { return keep(rec.Seq) }); err != nil {
		t.Fatal(err)
	}
	l.Close()
	index := filepath.Join(dir, segmentName(target.Base, indexSuffix))
	want, _ := os.ReadFile(index)
	for _, suffix := range []string{indexSuffix, timeIndexSuffix} {
		if err := os.Remove(filepath.Join(dir, segmentName(target.Base, suffix))); err != nil {
			t.Fatal(err)
		}
	}
	checkRebuilt(t, dir, target, keep, want)
	// A flipped bit in an entry: the checksum finds it, and the index is
	// rebuilt the same.
	flipped := bytes.Clone(want)
	flipped[indexEntryAt(2)] ^= 0x80
	if err := os.WriteFile(index, flipped, 0o644); err != nil {
		t.Fatal(err)
	}
	checkRebuilt(t, dir, target, keep, want)
}

func checkRebuilt(t *testing.T, dir string, target SegmentInfo, keep func(uint64) bool, want []byte) {
	t.Helper()
	index := filepath.Join(dir, segmentName(target.Base, indexSuffix))
	l, err := OpenLog(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for seq := uint64(0); seq < 80; seq++ {
		rec, err := l.ReadAt(seq)
		switch {
		case seq >= target.Base && seq < target.End && !keep(seq):
			if !errors.Is(err, ErrCompacted) {
				t.Fatalf("ReadAt(%d) after the rebuild: %v, want ErrCompacted", seq, err)
			}
		case err != nil || !bytes.Equal(rec.Body, compactTestBody(seq)):
			t.Fatalf("ReadAt(%d) after the rebuild: %q, %v", seq, rec.Body, err)
		}
	}
	if got := l.Stats().IndexRebuilds; got != 1 {
		t.Fatalf("IndexRebuilds %d, want 1", got)
	}
	if got, _ := os.ReadFile(index); !bytes.Equal(got, want) {
		t.Fatalf("the rebuilt index differs from the one compaction wrote")
	}
	if seq, err := l.SeekTime(time.Unix(0, 0)); err != nil || seq != 0 {
		t.Fatal(err)
	}
}

// A compacted segment is never appended to: when the segments after it
// are lost (a power cut before their contents were durable), the log goes
// on after the compacted segment's end, so no seq it removed is used again.
func TestCompactedSegmentFoundLast(t *testing.T) {
	for _, lose := range []string{"records", "files"} {
		t.Run(lose, func(t *testing.T) {
			dir := t.TempDir()
			l := compactFixture(t, dir, nil, 60, Options{})
			segs := l.Segments()
			target := segs[len(segs)-2] // the last sealed one
			// Remove its last records, so its end is not where its log's
			// records end.
			if _, err := l.Compact(context.Background(), target.Base, func(rec Record) bool { return rec.Seq < target.End-3 }); err != nil {
				t.Fatal(err)
			}
			l.Close()
			for _, s := range segs[len(segs)-1:] {
				for _, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix, ackSuffix} {
					name := filepath.Join(dir, segmentName(s.Base, suffix))
					if lose == "files" {
						os.Remove(name)
					} else if suffix == logSuffix {
						os.Truncate(name, fileHeaderSize)
					}
				}
			}
			l, err := OpenLog(dir, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if got := l.NextSeq(); got != target.End {
				t.Fatalf("after losing the segments after a compacted one, the log goes on at %d, want its end %d", got, target.End)
			}
			if _, err := l.ReadAt(target.End - 1); !errors.Is(err, ErrCompacted) {
				t.Fatalf("ReadAt of a removed seq at the end: %v, want ErrCompacted", err)
			}
			if err := l.Put(context.Background(), []byte("after")); err != nil {
				t.Fatal(err)
			}
			if rec, err := l.ReadAt(target.End); err != nil || string(rec.Body) != "after" {
				t.Fatalf("ReadAt(%d): %q, %v", target.End, rec.Body, err)
			}
		})
	}
}

// Close while a compaction is under way: the compaction gives up with
// ErrClosed and removes its files before Close returns; the segment stays
// as it was.
func TestCompactClose(t *testing.T) {
	dir := t.TempDir()
	l := compactFixture(t, dir, nil, 60, Options{})
	target := sealedSegs(l)[0]
	started, release := make(chan struct{}), make(chan struct{})
	var once bool
	result := make(chan error, 1)
	go func() {
		_, err := l.Compact(context.Background(), target.Base, func(rec Record) bool {
			if !once {
				once = true
				close(started)
				<-release
			}
			return rec.Seq%2 == 0
		})
		result <- err
	}()
	<-started
	closed := make(chan error, 1)
	go func() { closed <- l.Close() }()
	<-l.closeCh // Close has begun
	close(release)
	if err := <-result; !errors.Is(err, ErrClosed) {
		t.Fatalf("Compact under Close: %v, want ErrClosed", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*"+compactSuffix)); len(left) > 0 {
		t.Fatalf("Close left %v", left)
	}
	l, err := OpenLog(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for seq := target.Base; seq < target.End; seq++ {
		if rec, err := l.ReadAt(seq); err != nil || !bytes.Equal(rec.Body, compactTestBody(seq)) {
			t.Fatalf("ReadAt(%d) after a compaction Close cut short: %q, %v", seq, rec.Body, err)
		}
	}
}
