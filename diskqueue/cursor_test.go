package diskqueue_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spillq/spillq/diskqueue"
)

func openLog(t testing.TB, dir string, opts diskqueue.Options) *diskqueue.Log {
	t.Helper()
	l, err := diskqueue.OpenLog(dir, opts)
	if err != nil {
		t.Fatalf("OpenLog(%s): %v", dir, err)
	}
	return l
}

func openCursor(t testing.TB, l *diskqueue.Log, name string, start diskqueue.Start) *diskqueue.Cursor {
	t.Helper()
	c, err := l.Cursor(name, start)
	if err != nil {
		t.Fatalf("Cursor(%q): %v", name, err)
	}
	return c
}

// putReadAck puts body in l, then reads a record through c and
// acknowledges it.
func putReadAck(t testing.TB, ctx context.Context, l *diskqueue.Log, c *diskqueue.Cursor, body []byte) {
	t.Helper()
	if err := l.Put(ctx, body); err != nil {
		t.Fatal(err)
	}
	rec, err := c.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Ack(rec.Seq); err != nil {
		t.Fatal(err)
	}
}

// expectNothing fails if c has a record to hand out.
func expectNothing(t testing.TB, c *diskqueue.Cursor) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if rec, err := c.Read(ctx); err == nil {
		t.Fatalf("cursor %q: Read returned seq %d (%q), want nothing", c.Name(), rec.Seq, rec.Body)
	}
}

// smallSegments makes a segment of about 20 records.
var smallSegments = diskqueue.Options{MaxSegmentBytes: 1024}

// Each cursor sees every record from where it started, once and in order,
// whatever the others do; the log holds each record once.
func TestCursorsEachSeeTheirRecords(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, smallSegments)
	defer l.Close()
	a := openCursor(t, l, "a", diskqueue.FromOldest())
	putN(t, l, 0, 100)
	b := openCursor(t, l, "b", diskqueue.FromSeq(40))
	c := openCursor(t, l, "c", diskqueue.FromNext())
	putN(t, l, 100, 100)

	readN(t, a, 0, 200, true)
	readN(t, b, 40, 160, true)
	readN(t, c, 100, 100, true)
	for _, cur := range []*diskqueue.Cursor{a, b, c} {
		expectNothing(t, cur)
		if d := cur.Depth(); d != 0 {
			t.Errorf("cursor %q: Depth %d, want 0", cur.Name(), d)
		}
	}
	if got, want := l.Cursors(), []string{"a", "b", "c"}; !slices.Equal(got, want) {
		t.Errorf("Cursors() = %v, want %v", got, want)
	}
	if err := l.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Every record was acknowledged by every cursor: only the active
	// segment is left.
	if st := l.Stats(); st.Segments != 1 {
		t.Errorf("Segments = %d after every cursor acknowledged everything, want 1", st.Segments)
	}
}

// A segment stays until the slowest cursor has acknowledged all of it, and
// goes when it has.
func TestSlowestCursorHoldsSegments(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, smallSegments)
	defer l.Close()
	fast := openCursor(t, l, "fast", diskqueue.FromOldest())
	slow := openCursor(t, l, "slow", diskqueue.FromOldest())
	putN(t, l, 0, 200)
	readN(t, fast, 0, 200, true)
	if err := l.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := l.Stats(); st.FirstSeq != 0 {
		t.Fatalf("FirstSeq = %d with the slow cursor at 0, want 0", st.FirstSeq)
	}
	for seq := uint64(0); seq < 200; seq++ {
		if _, err := l.ReadAt(seq); err != nil {
			t.Fatalf("ReadAt(%d) with the slow cursor behind it: %v", seq, err)
		}
	}
	readN(t, slow, 0, 100, true)
	if err := l.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	st := l.Stats()
	if st.FirstSeq == 0 || st.FirstSeq > 100 {
		t.Fatalf("FirstSeq = %d with the slow cursor at 100, want in (0, 100]", st.FirstSeq)
	}
	if st.ReadSeq != 100 {
		t.Errorf("Log Stats ReadSeq = %d, want the slowest cursor's 100", st.ReadSeq)
	}
	readN(t, slow, 100, 100, true)
}

// Cursors, their positions and their out-of-order acknowledgements
// survive a reopen; a cursor is not created again at its Start.
func TestCursorsSurviveReopen(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, smallSegments)
	a := openCursor(t, l, "a", diskqueue.FromOldest())
	b := openCursor(t, l, "b", diskqueue.FromOldest())
	putN(t, l, 0, 100)
	readN(t, a, 0, 30, true)
	recs := readN(t, b, 0, 50, false)
	for _, r := range recs {
		if r.Seq%2 == 1 {
			if err := b.Ack(r.Seq); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	l = openLog(t, dir, smallSegments)
	defer l.Close()
	if got, want := l.Cursors(), []string{"a", "b"}; !slices.Equal(got, want) {
		t.Fatalf("after reopen Cursors() = %v, want %v", got, want)
	}
	a = openCursor(t, l, "a", diskqueue.FromNext()) // Start is ignored: it exists
	readN(t, a, 30, 70, true)
	b = openCursor(t, l, "b", diskqueue.FromNext())
	// The even seqs below 50 come back, then everything from 50.
	ctx := context.Background()
	for want := 0; want < 100; want++ {
		if want < 50 && want%2 == 1 {
			continue
		}
		rec, err := b.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(rec.Body, body(want)) {
			t.Fatalf("cursor b after reopen: got %q, want %q", rec.Body, body(want))
		}
		if err := b.Ack(rec.Seq); err != nil {
			t.Fatal(err)
		}
	}
	expectNothing(t, b)
}

// A Queue is a log with its own cursor: another cursor over it sees the
// same records, and the Queue's consumption does not free segments the
// other still needs.
func TestQueueWithAnotherCursor(t *testing.T) {
	dir := t.TempDir()
	q := openQueue(t, dir, smallSegments)
	audit := openCursor(t, q.Log, "audit", diskqueue.FromOldest())
	putN(t, q, 0, 100)
	readN(t, q, 0, 100, true)
	if err := q.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := q.Stats(); st.FirstSeq != 0 || st.Depth != 0 {
		t.Fatalf("Stats FirstSeq %d Depth %d, want 0 and 0 (the queue consumed all, audit none)", st.FirstSeq, st.Depth)
	}
	readN(t, audit, 0, 100, true)
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = openQueue(t, dir, smallSegments)
	defer q.Close()
	if got := q.Cursors(); !slices.Equal(got, []string{"", "audit"}) {
		t.Errorf("Cursors() = %q, want the queue's own and audit", got)
	}
	putN(t, q, 100, 1)
	readN(t, q, 100, 1, true)
}

// Verify checks each named cursor's files: a log used only through named
// cursors is healthy, and a damaged bitmap of one is reported by its path.
func TestVerifyNamedCursors(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, smallSegments)
	a := openCursor(t, l, "a", diskqueue.FromOldest())
	putN(t, l, 0, 100)
	readN(t, a, 0, 50, true)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := diskqueue.Verify(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("Verify of a healthy log with a named cursor: %v", rep.Problems)
	}
	if rep.ReadSeq != 50 {
		t.Errorf("Verify ReadSeq = %d, want the cursor's 50", rep.ReadSeq)
	}
	acks, _ := filepath.Glob(filepath.Join(dir, "cursors", "a", "*.ack"))
	if len(acks) == 0 {
		t.Fatal("cursor a has no acknowledgement files")
	}
	if err := os.WriteFile(acks[len(acks)-1], []byte("garbage that is not a header at all"), 0o644); err != nil {
		t.Fatal(err)
	}
	rep, err = diskqueue.Verify(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join("cursors", "a", filepath.Base(acks[len(acks)-1]))
	found := false
	for _, p := range rep.Problems {
		found = found || p.File == want
	}
	if !found {
		t.Fatalf("Verify problems %v, want one for %s", rep.Problems, want)
	}
}

// openAckFiles counts this process's open descriptors on .ack files
// under dir.
func openAckFiles(t *testing.T, dir string) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd on this system: %v", err)
	}
	n := 0
	for _, fd := range fds {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name()))
		if err == nil && strings.HasPrefix(target, dir) && strings.HasSuffix(target, ".ack") {
			n++
		}
	}
	return n
}

// An extra cursor costs its bitmap, not a copy: the same records under 16
// cursors take the log bytes of 1 cursor plus 15 more bitmaps.
func TestCursorCostIsABitmap(t *testing.T) {
	const records = 1000
	usage := func(cursors int) (logBytes, disk int64) {
		dir := t.TempDir()
		l := openLog(t, dir, diskqueue.Options{})
		for i := 0; i < cursors; i++ {
			openCursor(t, l, fmt.Sprintf("c%d", i), diskqueue.FromOldest())
		}
		putN(t, l, 0, records)
		if err := l.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		disk = l.Stats().DiskBytes
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		logs, _ := filepath.Glob(filepath.Join(dir, "0*.log"))
		for _, p := range logs {
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			logBytes += fi.Size()
		}
		return logBytes, disk
	}
	log1, disk1 := usage(1)
	log16, disk16 := usage(16)
	if log1 != log16 {
		t.Errorf("log bytes: %d with 1 cursor, %d with 16; want the same", log1, log16)
	}
	bitmap := int64(32 + (records+7)/8) // FORMAT.md: header and one bit per record
	if got, want := disk16-disk1, 15*bitmap; got != want {
		t.Errorf("16 cursors use %d bytes more than 1, want 15 bitmaps of %d = %d", got, bitmap, want)
	}
}

// Big records take the pwrite path on a mapped log, small ones the copy
// into the mapping; mixed, both read back in order, by ReadAt, after a
// reopen, and Verify finds nothing wrong.
func TestBigAndSmallRecordsMixed(t *testing.T) {
	dir := t.TempDir()
	opts := diskqueue.Options{MaxSegmentBytes: 1 << 20, RetainBytes: 1 << 30}
	q := openQueue(t, dir, opts)
	sizes := []int{10, 70 << 10, 100, 16 << 10, 16<<10 - 40, 300 << 10, 1}
	var bodies [][]byte
	for i := 0; i < 60; i++ {
		b := bytes.Repeat([]byte{byte('a' + i%26)}, sizes[i%len(sizes)])
		b = append(b, fmt.Sprintf("-%d", i)...)
		if err := q.Put(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, b)
	}
	if st := q.Stats(); st.WritePath != "mmap" {
		t.Logf("write path %q: only the copy path runs here", st.WritePath)
	}
	check := func(q *diskqueue.Queue, from int) {
		t.Helper()
		for seq := range bodies {
			rec, err := q.ReadAt(uint64(seq))
			if err != nil || !bytes.Equal(rec.Body, bodies[seq]) {
				t.Fatalf("ReadAt(%d): %d bytes, %v; want %d bytes", seq, len(rec.Body), err, len(bodies[seq]))
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for i := from; i < len(bodies); i++ {
			rec, err := q.Read(ctx)
			if err != nil || !bytes.Equal(rec.Body, bodies[i]) {
				t.Fatalf("Read %d: %d bytes, %v; want %d bytes", i, len(rec.Body), err, len(bodies[i]))
			}
			if err := q.Ack(rec.Seq); err != nil {
				t.Fatal(err)
			}
			if i == from+len(bodies)/2 {
				return // the rest after the reopen
			}
		}
	}
	check(q, 0)
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = openQueue(t, dir, opts)
	defer q.Close()
	check(q, len(bodies)/2+1)
	if rep, err := diskqueue.Verify(dir); err != nil || !rep.OK() {
		t.Fatalf("Verify: %v %v", err, rep.Problems)
	}
}

// TestDiskBytesMatchSegments: appends count their bytes in the disk usage
// in batches (at time-index entries and writer rounds); after a Sync the
// usage is exactly what the segments add up to, across rotations, records
// large and small, and cursors added and deleted while records go in.
func TestDiskBytesMatchSegments(t *testing.T) {
	l := openLog(t, t.TempDir(), diskqueue.Options{MaxSegmentBytes: 64 << 10})
	defer l.Close()
	ctx := context.Background()
	check := func(when string) {
		t.Helper()
		if err := l.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		var sum int64
		for _, s := range l.Segments() {
			sum += s.Bytes
		}
		if got := l.Stats().DiskBytes; got != sum {
			t.Fatalf("%s: DiskBytes %d, the segments add up to %d", when, got, sum)
		}
	}
	big := bytes.Repeat([]byte("x"), 5000)
	for i := 0; i < 3000; i++ {
		b := body(i)
		if i%97 == 0 {
			b = big
		}
		if err := l.Put(ctx, b); err != nil {
			t.Fatal(err)
		}
		switch i {
		case 500:
			openCursor(t, l, "a", diskqueue.FromOldest())
		case 1200:
			openCursor(t, l, "b", diskqueue.FromNext())
		case 2000:
			if err := l.DeleteCursor("a"); err != nil {
				t.Fatal(err)
			}
		}
		if i%700 == 0 {
			check(fmt.Sprintf("after %d records", i+1))
		}
	}
	check("at the end")
}

// TestOpenRefusesALogsDirectory: Open of a directory with named cursors and
// no cursor of a queue's own refuses it rather than make one at the oldest
// record, which nobody would read and which would keep every segment. A
// queue that also has named cursors opens as before, and so does a
// read-only view of either.
func TestOpenRefusesALogsDirectory(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	l := openLog(t, dir, diskqueue.Options{})
	openCursor(t, l, "a", diskqueue.FromOldest())
	if err := l.Put(ctx, []byte("x")); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if q, err := diskqueue.Open(dir, diskqueue.Options{}); !errors.Is(err, diskqueue.ErrInvalidOptions) {
		if q != nil {
			q.Close()
		}
		t.Fatalf("Open of a log's directory: %v, want ErrInvalidOptions", err)
	}
	view, err := diskqueue.OpenReadOnly(dir, diskqueue.Options{})
	if err != nil {
		t.Fatalf("OpenReadOnly of a log's directory: %v", err)
	}
	view.Close()
	l = openLog(t, dir, diskqueue.Options{})
	if got := l.Cursors(); !slices.Equal(got, []string{"a"}) {
		t.Errorf("after the refusal the log has cursors %q, want just a", got)
	}
	l.Close()

	qd := t.TempDir()
	q := openQueue(t, qd, diskqueue.Options{})
	openCursor(t, q.Log, "b", diskqueue.FromOldest())
	q.Close()
	q = openQueue(t, qd, diskqueue.Options{})
	q.Close()
}

// A cursor started at a time begins at the first record stored at or after
// it.
func TestCursorFromTime(t *testing.T) {
	dir := t.TempDir()
	l := openLog(t, dir, smallSegments)
	putN(t, l, 0, 50)
	// Reopened, so that record 50 is stamped with a reading of its own:
	// one log may stamp it with a reading taken before record 49's Put
	// (clock.go), and on a busy machine that reading was older than a mid
	// taken with sleeps of 2 ms around it. mid lies between the two stamps.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l = openLog(t, dir, smallSegments)
	defer l.Close()
	putN(t, l, 50, 50)
	before, err := l.ReadAt(49)
	if err != nil {
		t.Fatal(err)
	}
	after, err := l.ReadAt(50)
	if err != nil {
		t.Fatal(err)
	}
	if !after.Time.After(before.Time) {
		t.Fatalf("record 50 is stamped %v, record 49 %v", after.Time, before.Time)
	}
	mid := before.Time.Add(max(after.Time.Sub(before.Time)/2, 1))
	c := openCursor(t, l, "t", diskqueue.FromTime(mid))
	readN(t, c, 50, 50, true)
	expectNothing(t, c)
	late := openCursor(t, l, "late", diskqueue.FromTime(time.Now().Add(time.Hour)))
	putN(t, l, 100, 1)
	readN(t, late, 100, 1, true)
}
