package diskqueue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Each test listed here pins down a bug outside the test files that
// TestPowerCutAtEverySync found (the first five) or a review of the crash
// recovery did (the rest), fixed with it. Those of a cursor's bitmaps and
// registry now live in the test file of their concept (bitmap_test.go,
// ack_test.go, bitmapcache_test.go, cursors_test.go):
//
//   - The reader left in a segment the writer deleted under it (removeSegment
//     does not mark it gone): it reports the tombstones after it as damage
//     (TestReadPastDeletedSegmentAndTombstones), hands out again records
//     acknowledged before a restart (TestReadInDeletedSegmentRedeliversNothing),
//     or, right after Open, fails every Read (TestFirstReadAfterOpenWhileDeleting).
//   - Open takes a sealed segment followed by tombstones to end where the
//     next log begins (TestSealedSegmentBeforeTombstonesKeepsItsEnd).
//   - Open takes a segment rotated out and never fsynced, whose name a
//     directory fsync made durable, for a sealed one, and reports what the
//     power cut lost as damage (TestPowerCutLostRecordsAreNotDamage).
//   - An acknowledgement file made after its segment's directory fsync is
//     never made durable in the directory (TestAckFileMadeAfterItsSegmentIsDurable).
//   - Open takes the first of several segments a power cut left empty for
//     a sealed one, and reports what the cut lost as damage
//     (TestPowerCutLostEverySegment).
//   - Open warns that it cannot remove the orphan indexes of the segments
//     a power cut left empty, which it had removed (TestPowerCutLostEverySegment).
//   - A power cut that kept acknowledgements of records the log lost
//     (a tick fsyncs the bitmaps after the log) leaves their bits set past
//     the last segment's end, and the records appended after Open, which
//     get those seqs, start out acknowledged: a restart never delivers
//     them (TestPowerCutKeptAcksOfLostRecords).
//   - Open drops the segment a power cut left empty after tombstones, and
//     appends go on from the end of the segment before the tombstones:
//     their seqs, of records acknowledged and deleted, name new records
//     (TestPowerCutLostSegmentAfterTombstones).
//   - On the mapped path Open maps a cursor's bitmap as long as its
//     segment's records need, and a power cut may leave the file shorter
//     (fsynced as preallocated, grown by appends after): reading its bits
//     faulted, and Open failed (TestPowerCutShortBitmap).
//   - Open reports as damaged every acknowledgement file a power cut left
//     empty: nothing fsyncs a bitmap before it changes, so after a cut most
//     are (TestPowerCutEmptyBitmaps).
//   - Open removes a named cursor's bitmaps of segments a power cut lost
//     without making the removal durable, and a second power cut, after the
//     seqs went on in a new segment of the same base and before a sync
//     tick, brings the old bitmap back beside it: the new records, their
//     Puts returned, count acknowledged for that cursor
//     (TestPowerCutTwiceNamedBitmapComesBack).
//   - retirePassed fsyncs the bitmaps the floor has passed without first
//     fsyncing their directory, as syncAcks does: a named cursor's bitmap
//     made since the last tick is fsynced and lost with its name
//     (TestRetiredBitmapFsyncedWithItsName).
//   - Open stops counting acknowledgements at the first bitmap that says
//     its segment was never read, but a later bitmap can be durable with
//     bits set while the earlier one's raised readEnd was lost (kernel
//     writeback, or a round fsyncing a retired bitmap before the open
//     ones): those records come again, their Acks are refused and Depth
//     never reaches 0 (TestLaterBitmapDurableBeforeEarlierReadEnd; met once
//     in TestPowerCutAtEverySync as a final Depth of 7).
//   - Open sets aside as a damaged .bad file a last segment whose
//     preallocated size outlived its never-fsynced header
//     (TestPowerCutPreallocatedLostSegment).
//   - Verify reports a sealed segment's bitmap a power cut left shorter
//     than its records need, which Open grows again silently
//     (TestVerifyShortSealedBitmap).

// fixedBody is record i's body: 10 bytes, so a segment of
// fileHeaderSize+3*frameSize(10) bytes holds records 3k..3k+2.
func fixedBody(i int) []byte { return []byte(fmt.Sprintf("record-%03d", i)) }

// putFixed puts fixedBody(0..n-1).
func putFixed(t *testing.T, q *Queue, n int) {
	t.Helper()
	for i := range n {
		if err := q.Put(context.Background(), fixedBody(i)); err != nil {
			t.Fatal(err)
		}
	}
}

// readFixed reads what q has ready, each record fixedBody of its seq, and
// returns their seqs.
func readFixed(t *testing.T, q *Queue) []uint64 {
	t.Helper()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	var got []uint64
	for {
		rec, err := q.Read(done)
		if err != nil {
			return got
		}
		if !bytes.Equal(rec.Body, fixedBody(int(rec.Seq))) {
			t.Fatalf("seq %d holds %q", rec.Seq, rec.Body)
		}
		got = append(got, rec.Seq)
	}
}

// readAcking reads n records from r without waiting and acknowledges
// those ack says (every one, with ack nil).
func readAcking(t *testing.T, r interface {
	Read(context.Context) (Record, error)
	Ack(uint64) error
}, n int, ack func(seq uint64) bool) {
	t.Helper()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for range n {
		rec, err := r.Read(done)
		if err != nil {
			t.Fatal(err)
		}
		if ack == nil || ack(rec.Seq) {
			if err := r.Ack(rec.Seq); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// namedCursorsLog opens a log at /q on mfs, three records a segment,
// fsync per record and no sync tick, with the named cursors reading from
// the oldest, and puts records 0..3 (segments 0 and 3). It returns the
// options it opened with.
func namedCursorsLog(t *testing.T, mfs *memFS, names ...string) (Options, *Log, []*Cursor) {
	t.Helper()
	opts := Options{MaxSegmentBytes: threePerSegment, SyncEvery: 1, SyncInterval: time.Hour, FS: mfs}
	l, err := OpenLog("/q", opts)
	if err != nil {
		t.Fatal(err)
	}
	var cs []*Cursor
	for _, name := range names {
		c, err := l.Cursor(name, FromOldest())
		if err != nil {
			t.Fatal(err)
		}
		cs = append(cs, c)
	}
	for i := range 4 {
		if err := l.Put(context.Background(), fixedBody(i)); err != nil {
			t.Fatal(err)
		}
	}
	return opts, l, cs
}

const threePerSegment = fileHeaderSize + 3*recordHeaderSize + 3*10

// fixedQueue opens a queue at /q on a new memFS of kind, three records
// (fixedBody) a segment, and returns the options it opened with.
func fixedQueue(t *testing.T, kind memFSKind) (*memFS, Options, *Queue) {
	t.Helper()
	mfs := kind.new(t)
	opts := Options{MaxSegmentBytes: threePerSegment, FS: mfs}
	q, err := Open("/q", opts)
	if err != nil {
		t.Fatal(err)
	}
	return mfs, opts, q
}

// tombstoneFixture leaves in dir segments 0 (records 0..2, 2 not
// acknowledged), 3 and 6 (acknowledged whole and deleted ahead of segment
// 0: tombstones) and 9 (records 9..11, acknowledged), the queue closed.
func tombstoneFixture(t *testing.T, dir string, opts Options) {
	t.Helper()
	ctx := context.Background()
	q, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	putFixed(t, q, 12)
	readAcking(t, q, 12, func(seq uint64) bool { return seq != 2 })
	if err := q.Sync(ctx); err != nil { // segments 3 and 6 become tombstones
		t.Fatal(err)
	}
	if st := q.Stats(); st.Segments != 2 || st.ReadSeq != 2 {
		t.Fatalf("%d segments on disk, read cursor %d; want 2 (0 and 9; 3 and 6 tombstones) and 2", st.Segments, st.ReadSeq)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestReadPastDeletedSegmentAndTombstones: the reader sits at the end of a
// sealed segment whose last record it just handed out, with tombstones
// after it. Acknowledging that record lets the writer delete the segment
// and the tombstones in one go (removeSegment, which unlike ghostSegment
// does not mark the segment gone). The next Read finds its segment missing
// from the list, takes the first one left for its successor, and reports
// the tombstones' seqs, all acknowledged, as damage ("segments missing"):
// counted in CorruptRecords and logged as skipped damaged records. A Scan
// overtaken by a deletion there yields ErrCorrupt for them the same way.
func TestReadPastDeletedSegmentAndTombstones(t *testing.T) {
	dir := t.TempDir()
	var logs lockedBuffer
	opts := Options{
		MaxSegmentBytes: threePerSegment,
		SyncEvery:       1,
		SyncInterval:    5 * time.Millisecond, // see TestSealedSegmentBeforeTombstonesKeepsItsEnd
		Logger:          slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	tombstoneFixture(t, dir, opts)
	ctx := context.Background()
	done, cancel := context.WithCancel(ctx)
	cancel()
	q, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	rec, err := q.Read(done)
	if err != nil || rec.Seq != 2 {
		t.Fatalf("after a restart Read gave seq %d, %v; want the unacknowledged 2", rec.Seq, err)
	}
	if err := q.Ack(2); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); q.Stats().ReadSeq != 12; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the read cursor stays at %d", q.Stats().ReadSeq)
		}
	}
	if err := q.Sync(ctx); err != nil { // segment 0 and the tombstones are deleted
		t.Fatal(err)
	}
	if st := q.Stats(); st.FirstSeq != 9 {
		t.Fatalf("the oldest segment left is %d, want 9", st.FirstSeq)
	}
	if rec, err := q.Read(done); !errors.Is(err, context.Canceled) {
		t.Errorf("Read after everything was acknowledged: seq %d, %v", rec.Seq, err)
	}
	if st := q.Stats(); st.CorruptRecords != 0 {
		t.Errorf("Read counted %d corrupt records where segments were deleted as acknowledged\nwarnings:\n%s", st.CorruptRecords, logs.String())
	}
}

// TestFirstReadAfterOpenWhileDeleting: Open starts the reader at the
// stored read cursor, and loadAcks then moves the floor over the records
// acknowledged above it (a crash left the cursor behind the bitmaps: here
// it is set back by hand). Segments the floor passed whole are deleted by
// the writer's first round, while the first Read may be walking through
// them from the stale cursor: it then fails with ErrNotFound ("segment 0
// was deleted"), counted in ReadErrors, instead of going on to the oldest
// unacknowledged record; and when the deletion caught it after it had
// entered the segment (reset done, the records not read yet), so does
// every Read after it, until the queue is reopened (the channel's pump and
// nsqbridge log a warning and retry every 100ms, for ever). The writer and
// the reader are held here so the deletion lands inside that Read.
func TestFirstReadAfterOpenWhileDeleting(t *testing.T) {
	for _, kind := range memFSKinds() {
		t.Run(kind.name, func(t *testing.T) {
			mfs := kind.new(t)
			ctx := context.Background()
			done, cancel := context.WithCancel(ctx)
			cancel()
			// Records 0..5 in segments 0 and 3; 0..2 acknowledged, kept by
			// retention so that nothing is deleted before the restart.
			opts := Options{MaxSegmentBytes: threePerSegment, SyncEvery: 1, RetainBytes: 1 << 20, FS: mfs}
			q, err := Open("/q", opts)
			if err != nil {
				t.Fatal(err)
			}
			putFixed(t, q, 6)
			readAcking(t, q, 4, func(seq uint64) bool { return seq < 3 })
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
			// The cursor as a crash may leave it: behind the bitmaps.
			cur, err := mfs.OpenFile("/q/"+cursorName, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			for slot := range 2 {
				cur.WriteAt(encodeCursorSlot(cursorState{gen: 100, readSeq: 0}), int64(slot)*cursorSlotSize)
			}
			cur.Close()

			writerHeld, writerGo := make(chan struct{}), make(chan struct{})
			readerHeld, readerGo := make(chan struct{}), make(chan struct{})
			var writerOnce, readerOnce sync.Once
			opts.RetainBytes = 0
			opts.crashPointForTesting = func(p string) {
				if p == "cursor-persist" { // housekeep, before it deletes segment 0
					writerOnce.Do(func() { close(writerHeld); <-writerGo })
				}
			}
			log0 := "/q/" + segmentName(0, logSuffix)
			mfs.OnRead = func(name string, off int64) {
				if name == log0 && off == fileHeaderSize { // the reader's first records
					readerOnce.Do(func() { close(readerHeld); <-readerGo })
				}
			}
			q, err = Open("/q", opts)
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			if st := q.Stats(); st.ReadSeq != 3 {
				t.Fatalf("after Open the floor is %d, want 3", st.ReadSeq)
			}
			seg0 := q.segmentAt(0)
			// Without the bug the writer or the reader may never get where
			// they are held: never wait for them for ever.
			releaseWriter, releaseReader := sync.OnceFunc(func() { close(writerGo) }), sync.OnceFunc(func() { close(readerGo) })
			defer releaseWriter()
			defer releaseReader()
			select {
			case <-writerHeld:
			case <-time.After(5 * time.Second):
			}
			type result struct {
				rec Record
				err error
			}
			read := make(chan result, 1)
			go func() {
				rec, err := q.Read(done)
				read <- result{rec, err}
			}()
			var r result
			select {
			case <-readerHeld:
				releaseWriter()
				for closed := false; !closed; time.Sleep(time.Millisecond) {
					seg0.filesMu.Lock()
					closed = seg0.closed
					seg0.filesMu.Unlock()
				}
				releaseReader()
				r = <-read
			case r = <-read:
			}
			if r.err == nil && r.rec.Seq == 3 {
				return
			}
			if err := q.Sync(ctx); err != nil { // the deletion is over
				t.Fatal(err)
			}
			rec, err := q.Read(done)
			t.Errorf("the first Read after Open, while segment 0 was deleted: seq %d, %v; want 3; the next Read: seq %d, %v (read errors counted: %d)", r.rec.Seq, r.err, rec.Seq, err, q.Stats().ReadErrors)
		})
	}
}

// TestReadInDeletedSegmentRedeliversNothing: after a restart the reader
// starts at the read cursor, and records above it acknowledged before the
// restart are skipped by their bits. Acknowledging the record at the
// cursor moves the floor over them, and the writer deletes their segment
// while the reader is still in it, with the segment's records in its
// buffer. The next Read decodes the following record from that buffer,
// finds the segment's acknowledgement file gone (ackFor: not there, so
// createAckFile makes a new, empty one, for a segment that no longer
// exists) and hands out a record acknowledged before the restart: a
// duplicate with no crash in between. TestPowerCutAtEverySync meets it
// about once in 150 runs.
func TestReadInDeletedSegmentRedeliversNothing(t *testing.T) {
	dir := t.TempDir()
	opts := Options{MaxSegmentBytes: threePerSegment, SyncEvery: 1}
	ctx := context.Background()
	done, cancel := context.WithCancel(ctx)
	cancel()
	q, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 { // segments 0 and 3
		if err := q.Put(ctx, fixedBody(i)); err != nil {
			t.Fatal(err)
		}
	}
	readAcking(t, q, 4, func(seq uint64) bool { return seq == 1 || seq == 2 })
	if err := q.Close(); err != nil { // read cursor 0; 1 and 2 acknowledged
		t.Fatal(err)
	}

	q, err = Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	rec, err := q.Read(done)
	if err != nil || rec.Seq != 0 {
		t.Fatalf("after a restart Read gave seq %d, %v; want 0", rec.Seq, err)
	}
	if err := q.Ack(0); err != nil { // the floor moves to 3
		t.Fatal(err)
	}
	if err := q.Sync(ctx); err != nil { // segment 0 is deleted
		t.Fatal(err)
	}
	if st := q.Stats(); st.FirstSeq != 3 {
		t.Fatalf("the oldest segment is %d, want 3 (0 deleted)", st.FirstSeq)
	}
	var got []uint64
	for {
		rec, err := q.Read(done)
		if err != nil {
			break
		}
		got = append(got, rec.Seq)
	}
	if len(got) != 3 || got[0] != 3 {
		_, statErr := os.Stat(filepath.Join(dir, segmentName(0, ackSuffix)))
		t.Errorf("Read after segment 0 was deleted gave seqs %v, want 3, 4, 5 (1 and 2 were acknowledged before the restart); the deleted segment's acknowledgement file: %v", got, statErr)
	}
}
