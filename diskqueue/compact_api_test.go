package diskqueue_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spillq/spillq/diskqueue"
)

// compactBody is the body of record seq in these tests.
func compactBody(seq uint64) []byte { return []byte(fmt.Sprintf("record-%04d-%s", seq, "payload")) }

// keepEven keeps the records with an even seq.
func keepEven(rec diskqueue.Record) bool { return rec.Seq%2 == 0 }

// putSealed opens a log in dir with small segments and puts n records, then
// waits for the writer to seal every segment but the active one.
func putSealed(t *testing.T, dir string, n int, opts diskqueue.Options) *diskqueue.Log {
	t.Helper()
	if opts.MaxSegmentBytes == 0 {
		opts.MaxSegmentBytes = 1024
	}
	l, err := diskqueue.OpenLog(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < n; i++ {
		if err := l.Put(ctx, compactBody(uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	return l
}

// sealedSegments returns the segments Compact takes.
func sealedSegments(l *diskqueue.Log) []diskqueue.SegmentInfo {
	var out []diskqueue.SegmentInfo
	for _, s := range l.Segments() {
		if s.Sealed {
			out = append(out, s)
		}
	}
	return out
}

// checkCompacted checks ReadAt of every seq below n: records keep kept (or
// outside the compacted segments) read back whole, the others give
// ErrCompacted.
func checkCompacted(t *testing.T, l *diskqueue.Log, n uint64, removed func(seq uint64) bool) {
	t.Helper()
	for seq := uint64(0); seq < n; seq++ {
		rec, err := l.ReadAt(seq)
		switch {
		case removed(seq):
			if !errors.Is(err, diskqueue.ErrCompacted) {
				t.Fatalf("ReadAt(%d) of a removed record: got %q, %v; want ErrCompacted", seq, rec.Body, err)
			}
		case err != nil:
			t.Fatalf("ReadAt(%d) of a record kept: %v", seq, err)
		case rec.Seq != seq || string(rec.Body) != string(compactBody(seq)):
			t.Fatalf("ReadAt(%d): got seq %d %q", seq, rec.Seq, rec.Body)
		}
	}
}

func TestCompactReadAtScanAndReopen(t *testing.T) {
	dir := t.TempDir()
	const n = 200
	l := putSealed(t, dir, n, diskqueue.Options{SyncEvery: 1})
	if _, err := l.Cursor("r", diskqueue.FromOldest()); err != nil {
		t.Fatal(err) // Verify expects a cursor
	}
	sealed := sealedSegments(l)
	if len(sealed) < 3 {
		t.Fatalf("%d sealed segments, want at least 3", len(sealed))
	}
	target := sealed[1]
	ctx := context.Background()
	var seen []uint64
	st, err := l.Compact(ctx, target.Base, func(rec diskqueue.Record) bool {
		seen = append(seen, rec.Seq)
		if string(rec.Body) != string(compactBody(rec.Seq)) {
			t.Errorf("keep got seq %d %q", rec.Seq, rec.Body)
		}
		return keepEven(rec)
	})
	if err != nil {
		t.Fatal(err)
	}
	count := int64(target.End - target.Base)
	if len(seen) != int(count) || seen[0] != target.Base || seen[len(seen)-1] != target.End-1 {
		t.Fatalf("keep saw %d records %v, want the segment's %d in order", len(seen), seen, count)
	}
	if st.Base != target.Base || st.End != target.End || st.Kept+st.Removed != count || st.Removed == 0 ||
		st.LogBytesAfter >= st.LogBytesBefore {
		t.Fatalf("CompactStats %+v for segment [%d, %d)", st, target.Base, target.End)
	}
	removed := func(seq uint64) bool { return seq >= target.Base && seq < target.End && seq%2 == 1 }
	checkCompacted(t, l, n, removed)
	if ls := l.Stats(); ls.CompactedRecords != st.Removed || ls.CompactedBytes != st.LogBytesBefore-st.LogBytesAfter {
		t.Fatalf("Stats: compacted %d records, %d bytes; CompactStats %+v", ls.CompactedRecords, ls.CompactedBytes, st)
	}
	// Scan yields every record but the removed ones, in order.
	want := uint64(0)
	for rec, err := range l.Scan(0, n) {
		if err != nil {
			t.Fatal(err)
		}
		for removed(want) {
			want++
		}
		if rec.Seq != want || string(rec.Body) != string(compactBody(want)) {
			t.Fatalf("Scan: got seq %d %q, want %d", rec.Seq, rec.Body, want)
		}
		want++
	}
	if want != n {
		t.Fatalf("Scan ended at %d, want %d", want, n)
	}
	// Scans starting inside the compacted segment, on a removed seq or not.
	for from := target.Base; from < target.End; from++ {
		first := true
		for rec, err := range l.Scan(from, target.End+1) {
			if err != nil {
				t.Fatal(err)
			}
			if first && rec.Seq != from+from%2 {
				t.Fatalf("Scan from %d starts at %d", from, rec.Seq)
			}
			first = false
		}
	}
	// Compacting again with the same rule removes nothing and writes nothing.
	again, err := l.Compact(ctx, target.Base, keepEven)
	if err != nil || again.Removed != 0 || again.Kept != st.Kept || again.LogBytesAfter != st.LogBytesAfter {
		t.Fatalf("second compaction: %+v, %v; want a no-op keeping %d", again, err, st.Kept)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// A new Open reads the compacted segment from its files.
	l, err = diskqueue.OpenLog(dir, diskqueue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	checkCompacted(t, l, n, removed)
	if seq, err := l.SeekTime(time.Unix(0, 0)); err != nil || seq != 0 {
		t.Fatalf("SeekTime: %d, %v", seq, err)
	}
	// Compacted again, further.
	third, err := l.Compact(ctx, target.Base, func(rec diskqueue.Record) bool { return rec.Seq%4 == 0 })
	if err != nil || third.Removed != st.Kept/2 && third.Removed != (st.Kept+1)/2 {
		t.Fatalf("third compaction: %+v, %v", third, err)
	}
	removed2 := func(seq uint64) bool { return seq >= target.Base && seq < target.End && seq%4 != 0 }
	checkCompacted(t, l, n, removed2)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := diskqueue.Verify(dir)
	if err != nil || !rep.OK() {
		t.Fatalf("Verify after compactions: %v, %v", rep.Problems, err)
	}
	if rep.Removed != uint64(st.Removed+third.Removed) {
		t.Fatalf("Verify counts %d removed records, want %d", rep.Removed, st.Removed+third.Removed)
	}
}

func TestCompactRefuses(t *testing.T) {
	dir := t.TempDir()
	l := putSealed(t, dir, 100, diskqueue.Options{})
	ctx := context.Background()
	segs := l.Segments()
	active := segs[len(segs)-1]
	if active.Sealed {
		t.Fatalf("the last segment is sealed: %+v", active)
	}
	all := func(diskqueue.Record) bool { return false }
	if _, err := l.Compact(ctx, active.Base, all); !errors.Is(err, diskqueue.ErrNotCompactable) {
		t.Fatalf("Compact of the active segment: %v, want ErrNotCompactable", err)
	}
	if _, err := l.Compact(ctx, segs[0].Base+1, all); !errors.Is(err, diskqueue.ErrNotFound) {
		t.Fatalf("Compact of a seq no segment starts at: %v, want ErrNotFound", err)
	}
	if _, err := l.Compact(ctx, active.End+100, all); !errors.Is(err, diskqueue.ErrNotFound) {
		t.Fatalf("Compact past the end: %v, want ErrNotFound", err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := l.Compact(done, segs[0].Base, all); !errors.Is(err, context.Canceled) {
		t.Fatalf("Compact with a cancelled context: %v", err)
	}
	if rec, err := l.ReadAt(segs[0].Base); err != nil || rec.Seq != segs[0].Base {
		t.Fatalf("after a cancelled compaction ReadAt: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if filepath.Ext(e.Name()) == ".compact" {
			t.Fatalf("a refused compaction left %s", e.Name())
		}
	}
	l.Close()
	if _, err := l.Compact(ctx, segs[0].Base, all); !errors.Is(err, diskqueue.ErrClosed) {
		t.Fatalf("Compact after Close: %v, want ErrClosed", err)
	}
	ro, err := diskqueue.OpenReadOnly(dir, diskqueue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if _, err := ro.Compact(ctx, segs[0].Base, all); !errors.Is(err, diskqueue.ErrReadOnly) {
		t.Fatalf("Compact of a read-only queue: %v, want ErrReadOnly", err)
	}
}

// A cursor's Read passes over the records compaction removed before it
// read them, counting them acknowledged; one it had handed out may still
// be acknowledged; Depth ends where it would have had they been read and
// acknowledged; once every record is, the segments go.
func TestCompactCursor(t *testing.T) {
	dir := t.TempDir()
	const n = 120
	l := putSealed(t, dir, 0, diskqueue.Options{MaxSegmentBytes: 1024})
	defer l.Close()
	c, err := l.Cursor("c", diskqueue.FromOldest())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < n; i++ {
		if err := l.Put(ctx, compactBody(uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	sealed := sealedSegments(l)
	target := sealed[0]
	// Hand out the first half of the first segment, acknowledging none.
	mid := (target.Base + target.End) / 2
	var inFlight []uint64
	for seq := target.Base; seq < mid; seq++ {
		rec, err := c.Read(ctx)
		if err != nil || rec.Seq != seq {
			t.Fatalf("Read: %d, %v; want %d", rec.Seq, err, seq)
		}
		inFlight = append(inFlight, seq)
	}
	st, err := l.Compact(ctx, target.Base, keepEven)
	if err != nil {
		t.Fatal(err)
	}
	// Every record in flight may be acknowledged, removed or not.
	for _, seq := range inFlight {
		if err := c.Ack(seq); err != nil {
			t.Fatalf("Ack(%d) of a record in flight: %v", seq, err)
		}
	}
	if got, want := c.Depth(), int64(n-len(inFlight)); got != want {
		t.Fatalf("Depth after acknowledging the records in flight: %d, want %d (removed records count until Read passes them)", got, want)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	var got []uint64
	for {
		rec, err := c.Read(done)
		if errors.Is(err, context.Canceled) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if string(rec.Body) != string(compactBody(rec.Seq)) {
			t.Fatalf("Read: seq %d %q", rec.Seq, rec.Body)
		}
		got = append(got, rec.Seq)
	}
	want := uint64(mid)
	for _, seq := range got {
		for want < target.End && want%2 == 1 {
			want++
		}
		if seq != want {
			t.Fatalf("Read after compaction: got %d, want %d (all: %v)", seq, want, got)
		}
		want++
	}
	if want != n {
		t.Fatalf("Read stopped at %d, want %d", want, n)
	}
	if d, cs := c.Depth(), c.Stats(); d != int64(len(got)) || cs.InFlight != int64(len(got)) {
		t.Fatalf("Depth %d, InFlight %d after reading everything; want %d each", d, cs.InFlight, len(got))
	}
	if cs := c.Stats(); cs.Acks != int64(len(inFlight)) {
		t.Fatalf("Acks %d: records passed over are not Acks; want %d", cs.Acks, len(inFlight))
	}
	for _, seq := range got {
		if err := c.Ack(seq); err != nil {
			t.Fatal(err)
		}
	}
	if d := c.Depth(); d != 0 {
		t.Fatalf("Depth %d after acknowledging everything", d)
	}
	if err := l.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if first := l.Stats().FirstSeq; first <= target.Base {
		t.Fatalf("the compacted segment stays after every record was acknowledged (FirstSeq %d)", first)
	}
	_ = st
}

// Unacknowledged skips what compaction removed, and a cursor reopened
// after a compaction passes over the removed records too.
func TestCompactUnacknowledgedAndReopen(t *testing.T) {
	dir := t.TempDir()
	const n = 100
	l := putSealed(t, dir, 0, diskqueue.Options{MaxSegmentBytes: 1024})
	c, err := l.Cursor("c", diskqueue.FromOldest())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := 0; i < n; i++ {
		if err := l.Put(ctx, compactBody(uint64(i))); err != nil {
			t.Fatal(err)
		}
	}
	l.Sync(ctx)
	target := sealedSegments(l)[0]
	if _, err := l.Compact(ctx, target.Base, keepEven); err != nil {
		t.Fatal(err)
	}
	removed := func(seq uint64) bool { return seq >= target.Base && seq < target.End && seq%2 == 1 }
	count := 0
	for rec, err := range c.Unacknowledged(0, n) {
		if err != nil || removed(rec.Seq) {
			t.Fatalf("Unacknowledged yields %d, %v", rec.Seq, err)
		}
		count++
	}
	kept := 0
	for seq := uint64(0); seq < n; seq++ {
		if !removed(seq) {
			kept++
		}
	}
	if count != kept {
		t.Fatalf("Unacknowledged yields %d records, want %d", count, kept)
	}
	l.Close()
	l, err = diskqueue.OpenLog(dir, diskqueue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err = l.Cursor("c", diskqueue.FromOldest())
	if err != nil {
		t.Fatal(err)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	read := 0
	for {
		rec, err := c.Read(done)
		if err != nil {
			break
		}
		if removed(rec.Seq) {
			t.Fatalf("Read after reopen hands out removed record %d", rec.Seq)
		}
		if err := c.Ack(rec.Seq); err != nil {
			t.Fatal(err)
		}
		read++
	}
	if read != kept || c.Depth() != 0 {
		t.Fatalf("read %d records, Depth %d; want %d and 0", read, c.Depth(), kept)
	}
	// Each removed record was in Depth until the reader passed it: Passed
	// says how many, for a consumer that counted them in its backlog.
	if p := c.Passed(); p != int64(n-kept) {
		t.Fatalf("Passed %d, want the %d records removed unread", p, n-kept)
	}
}

// SeekTime over a compacted segment finds the first record kept at or
// after the time.
func TestCompactSeekTime(t *testing.T) {
	dir := t.TempDir()
	l := putSealed(t, dir, 300, diskqueue.Options{MaxSegmentBytes: 8 << 10})
	defer l.Close()
	ctx := context.Background()
	target := sealedSegments(l)[0]
	var times []time.Time
	for seq := uint64(0); seq < 300; seq++ {
		rec, err := l.ReadAt(seq)
		if err != nil {
			t.Fatal(err)
		}
		times = append(times, rec.Time)
	}
	if _, err := l.Compact(ctx, target.Base, func(rec diskqueue.Record) bool { return rec.Seq%3 == 0 }); err != nil {
		t.Fatal(err)
	}
	for seq := uint64(0); seq < 300; seq += 7 {
		got, err := l.SeekTime(times[seq])
		if err != nil {
			t.Fatal(err)
		}
		want := seq
		for want >= target.Base && want < target.End && want%3 != 0 {
			want++
		}
		// Records put in the same nanosecond: the first of them.
		for want > 0 && times[want-1].Equal(times[seq]) && !(want-1 >= target.Base && want-1 < target.End && (want-1)%3 != 0) {
			want--
		}
		if got > want {
			t.Fatalf("SeekTime(time of %d) = %d, want at most %d", seq, got, want)
		}
		if rec, err := l.ReadAt(got); err != nil || rec.Time.Before(times[seq]) {
			t.Fatalf("SeekTime(time of %d) = %d, a record at %v, %v", seq, got, rec.Time, err)
		}
	}
}

// TestReadOnlyViewOfALiveCompaction: a read-only view (the operator tool
// beside a running process) that listed a segment before the live log
// compacted it opens the compacted files on first use. It must go by their
// size, not the size it listed: Scan yields the kept records and nothing
// after them, and every lookup gives the record or ErrCompacted.
func TestReadOnlyViewOfALiveCompaction(t *testing.T) {
	dir := t.TempDir()
	const n = 200
	l := putSealed(t, dir, n, diskqueue.Options{SyncEvery: 1})
	defer l.Close()
	view, err := diskqueue.OpenReadOnly(dir, diskqueue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer view.Close()
	sealed := sealedSegments(l)
	if len(sealed) < 3 {
		t.Fatalf("%d sealed segments, want at least 3", len(sealed))
	}
	target := sealed[1]
	if _, err := l.Compact(context.Background(), target.Base, keepEven); err != nil {
		t.Fatal(err)
	}
	removed := func(seq uint64) bool { return seq >= target.Base && seq < target.End && seq%2 == 1 }
	want := target.Base
	for rec, err := range view.Scan(target.Base, target.End) {
		if err != nil {
			t.Fatalf("Scan at %d: %v", want, err)
		}
		for removed(want) {
			want++
		}
		if rec.Seq != want || string(rec.Body) != string(compactBody(want)) {
			t.Fatalf("Scan: got seq %d %q, want %d", rec.Seq, rec.Body, want)
		}
		want++
	}
	for removed(want) {
		want++
	}
	if want != target.End {
		t.Fatalf("Scan ended at %d, want %d", want, target.End)
	}
	checkCompacted(t, view.Log, target.End, removed)
}
