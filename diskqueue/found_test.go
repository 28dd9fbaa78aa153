package diskqueue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// Each test here pins down a bug outside the test files that
// TestPowerCutAtEverySync found (the first five) or a review of the crash
// recovery did (the rest), fixed with it:
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
	opts := Options{MaxSegmentBytes: threePerSegment, SyncEvery: 1, SyncInterval: time.Hour, fsForTesting: mfs}
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
	opts := Options{MaxSegmentBytes: threePerSegment, fsForTesting: mfs}
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
			opts := Options{MaxSegmentBytes: threePerSegment, SyncEvery: 1, RetainBytes: 1 << 20, fsForTesting: mfs}
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
			mfs.onRead = func(name string, off int64) {
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

// TestAckFileMadeAfterItsSegmentIsDurable: syncAcks (the tick, and Close)
// fsyncs acknowledgement files but never their directory, so one created
// after its segment's files were made durable stays out of the directory
// after a power cut, however often it was fsynced: its acknowledgements
// are lost, and their records delivered again. ackFor creates one for a
// segment found without (written before acknowledgement files existed,
// format v1, or whose file a crash lost), and createSegment's can miss
// the directory fsync that covers its log when a tombstone's fsync comes
// between the two (TestPowerCutAtEverySync meets that about once in 100
// runs). Nothing sets dirDirty for such a file.
func TestAckFileMadeAfterItsSegmentIsDurable(t *testing.T) {
	for _, kind := range memFSKinds() {
		t.Run(kind.name, func(t *testing.T) {
			mfs := kind.new(t)
			opts := Options{SyncEvery: 1, fsForTesting: mfs}
			ctx := context.Background()
			done, cancel := context.WithCancel(ctx)
			cancel()
			q, err := Open("/q", opts)
			if err != nil {
				t.Fatal(err)
			}
			putFixed(t, q, 3)
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
			// The segment as a format v1 queue has it: no bitmap.
			if err := mfs.Remove("/q/" + segmentName(0, ackSuffix)); err != nil {
				t.Fatal(err)
			}
			mfs.SyncDir("/q")

			q, err = Open("/q", opts)
			if err != nil {
				t.Fatal(err)
			}
			for range 2 {
				if _, err := q.Read(done); err != nil {
					t.Fatal(err)
				}
			}
			if err := q.Ack(1); err != nil {
				t.Fatal(err)
			}
			if err := q.Close(); err != nil { // fsyncs the bitmap
				t.Fatal(err)
			}
			c := mfs.crashClone() // a power cut after Close returned
			defer c.release()
			listing := c.listing("/q")
			opts.fsForTesting = c
			q, err = Open("/q", opts)
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			var got []uint64
			for {
				rec, err := q.Read(done)
				if err != nil {
					break
				}
				got = append(got, rec.Seq)
			}
			if len(got) != 2 || got[0] != 0 || got[1] != 2 {
				t.Errorf("after a power cut Read gave %v, want 0 and 2: 1 was acknowledged before Close\nfiles at the cut:%s", got, listing)
			}
		})
	}
}

// TestPowerCutKeptAcksOfLostRecords: a sync tick fsyncs the active log
// (syncNow) and then, later in the round, the acknowledgement files
// (syncAcks). A record appended between the two, read and acknowledged
// (a reader does not wait for the fsync, nor does a Put under SyncEvery 1
// return before it), has its bit made durable and not its bytes: after a
// power cut there the last segment ends before it and its bitmap has the
// bit set past that end. Open kept the bit, and the next Put, which gets
// that seq again, was taken for acknowledged: its Ack failed with
// ErrNotInFlight, and after a restart it was never delivered, though its
// Put returned under SyncEvery 1. The cut is made here from two durable
// states: the log as of a Sync, the bitmap as of the later Close.
func TestPowerCutKeptAcksOfLostRecords(t *testing.T) {
	for _, kind := range memFSKinds() {
		t.Run(kind.name, func(t *testing.T) {
			mfs := kind.new(t)
			ctx := context.Background()
			opts := Options{SyncEvery: 1000, SyncInterval: time.Hour, fsForTesting: mfs}
			q, err := Open("/q", opts)
			if err != nil {
				t.Fatal(err)
			}
			putFixed(t, q, 3)
			if err := q.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			cut := mfs.crashClone() // the log durable with records 0..2
			defer cut.release()
			if err := q.Put(ctx, fixedBody(3)); err != nil {
				t.Fatal(err)
			}
			for _, seq := range readFixed(t, q) {
				if err := q.Ack(seq); err != nil {
					t.Fatal(err)
				}
			}
			if err := q.Close(); err != nil { // fsyncs the bitmap: bits 0..3
				t.Fatal(err)
			}
			ack := "/q/" + segmentName(0, ackSuffix)
			b, err := readFile(mfs, ack)
			if err != nil {
				t.Fatal(err)
			}
			f, err := cut.OpenFile(ack, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteAt(b, 0)
			f.Sync()
			f.Close()

			var logs lockedBuffer
			opts = Options{SyncEvery: 1, fsForTesting: cut,
				Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))}
			q, err = Open("/q", opts)
			if err != nil {
				t.Fatal(err)
			}
			if st := q.Stats(); st.WriteSeq != 3 || st.ReadSeq != 3 {
				q.Close()
				t.Fatalf("after the cut the log ends at %d, the read cursor is %d; want 3 and 3", st.WriteSeq, st.ReadSeq)
			}
			if err := q.Put(ctx, fixedBody(3)); err != nil { // seq 3 again; SyncEvery 1: promised
				t.Fatal(err)
			}
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
			q, err = Open("/q", opts)
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			got := readFixed(t, q)
			var ackErr error
			for _, seq := range got {
				if err := q.Ack(seq); err != nil && ackErr == nil {
					ackErr = err
				}
			}
			if len(got) != 1 || got[0] != 3 || ackErr != nil {
				t.Errorf("the record put after the cut at seq 3: delivered %v after a restart (want [3]), Ack: %v\nwarnings:\n%s", got, ackErr, logs.String())
			}
		})
	}
}

// TestPowerCutShortBitmap: an acknowledgement file is preallocated as
// records are appended (reserve) and fsynced by the sync tick and Close,
// never when it grows, so after a power cut it may be shorter than the
// records the log kept need, and than the readEnd it holds (raised up to
// readEndStep records ahead of the reader). Open (openAckFile) mapped it at
// the length its records need and counted the bits below readEnd: past
// the file's end the mapping faulted, and Open failed with errFault. Here
// the bitmap is durable as Close left it (4096 bytes, room for 32512
// records, its readEnd past that), and the log with 1000 records more, put
// and synced after a restart.
func TestPowerCutShortBitmap(t *testing.T) {
	for _, kind := range memFSKinds() {
		t.Run(kind.name, func(t *testing.T) {
			mfs := kind.new(t)
			ctx := context.Background()
			opts := Options{SyncEvery: 1 << 30, SyncInterval: time.Hour, fsForTesting: mfs}
			q, err := Open("/q", opts)
			if err != nil {
				t.Fatal(err)
			}
			body := []byte("x")
			for range 32500 {
				if err := q.Put(ctx, body); err != nil {
					t.Fatal(err)
				}
			}
			done, cancel := context.WithCancel(ctx)
			cancel()
			for {
				rec, err := q.Read(done)
				if err != nil {
					break
				}
				if err := q.Ack(rec.Seq); err != nil {
					t.Fatal(err)
				}
			}
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
			q, err = Open("/q", opts)
			if err != nil {
				t.Fatal(err)
			}
			for range 1000 {
				if err := q.Put(ctx, body); err != nil {
					t.Fatal(err)
				}
			}
			if err := q.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			cut := mfs.crashClone()
			defer cut.release()
			listing := cut.listing("/q")
			q.Close()
			opts.fsForTesting = cut
			q, err = Open("/q", opts)
			if err != nil {
				t.Fatalf("open after the cut: %v\nfiles at the cut:%s", err, listing)
			}
			defer q.Close()
			n := 0
			for {
				rec, err := q.Read(done)
				if err != nil {
					break
				}
				if err := q.Ack(rec.Seq); err != nil {
					t.Fatalf("ack %d: %v", rec.Seq, err)
				}
				n++
			}
			if st := q.Stats(); n != 1000 || st.ReadSeq != 33500 || st.ReadErrors != 0 {
				t.Errorf("after the cut: delivered %d records (want the 1000 put after the restart), read cursor %d (want 33500), %d read errors", n, st.ReadSeq, st.ReadErrors)
			}
		})
	}
}

// TestPowerCutEmptyBitmaps: a segment's acknowledgement files are made
// with their header (createSegment) and fsynced only once something in
// them changed (syncAcks, a retired bitmap's fsync), not when sealed. A
// directory fsync makes their names durable, so after a power cut every
// bitmap of a segment no cursor had read into yet is empty, and Open
// warned for each that it was damaged ("its records above the read cursor
// are delivered again"), though it never held an acknowledgement. Here
// four records are put under SyncEvery 1, and the power cut comes after
// the last Put returned.
func TestPowerCutEmptyBitmaps(t *testing.T) {
	for _, kind := range memFSKinds() {
		t.Run(kind.name, func(t *testing.T) {
			mfs := kind.new(t)
			opts := Options{MaxSegmentBytes: threePerSegment, SyncEvery: 1, fsForTesting: mfs}
			q, err := Open("/q", opts)
			if err != nil {
				t.Fatal(err)
			}
			putFixed(t, q, 4)
			cut := mfs.crashClone()
			defer cut.release()
			listing := cut.listing("/q")
			q.Close()
			// Verify, before Open repairs anything, agrees with Open: the
			// empty bitmaps, and the last segment's indexes (never fsynced
			// before it is sealed), are no damage.
			if rep, err := verify("/q", Options{fsForTesting: cut}); err != nil || len(rep.Problems) > 0 {
				t.Errorf("Verify after the cut: %v, problems %v\nfiles at the cut:%s", err, rep.Problems, listing)
			}
			var logs lockedBuffer
			opts.fsForTesting = cut
			opts.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
			q, err = Open("/q", opts)
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			got := readFixed(t, q)
			for _, seq := range got {
				if err := q.Ack(seq); err != nil {
					t.Fatal(err)
				}
			}
			if len(got) != 4 || strings.Contains(logs.String(), "damaged") {
				t.Errorf("after the cut: delivered %v (want 0..3)\nfiles at the cut:%s\nwarnings:\n%s", got, listing, logs.String())
			}
		})
	}
}

// TestPowerCutTwiceNamedBitmapComesBack: the first power cut leaves
// segment 3 empty (its name made durable, its contents never fsynced)
// and cursor n's bitmap of it holding acknowledgements (fsynced by a
// tick: records are read from the page cache). Open drops segment 3
// (dropLostTail) and removes the bitmap (removeOrphanBitmaps), with no
// fsync of the cursor's directory; appends go on in segment 0 and rotate
// to a new segment 3, whose log, and the bitmap beside it of the Queue's
// own cursor, a directory fsync makes durable before the Put returns.
// Cursor n's new bitmap is made durable in its directory only by the
// next tick's syncAcks: a second power cut before it brings back the old
// one, under which record 3, put after the first cut and promised, was
// counted acknowledged by cursor n and never delivered to it.
func TestPowerCutTwiceNamedBitmapComesBack(t *testing.T) {
	for _, kind := range memFSKinds() {
		t.Run(kind.name, func(t *testing.T) {
			mfs := kind.new(t)
			ctx := context.Background()
			done, cancel := context.WithCancel(ctx)
			cancel()
			opts, l, cs := namedCursorsLog(t, mfs, "n")
			c := cs[0]
			readAcking(t, c, 4, nil)
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			// The first cut: segment 3's files empty, cursor n's bitmap of
			// it as fsynced.
			for _, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
				f, err := mfs.OpenFile("/q/"+segmentName(3, suffix), os.O_RDWR|os.O_TRUNC, 0)
				if err != nil {
					t.Fatal(err)
				}
				f.Sync()
				f.Close()
			}
			cut1 := mfs.crashClone()
			defer cut1.release()
			opts.fsForTesting = cut1
			l, err := OpenLog("/q", opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Put(ctx, fixedBody(3)); err != nil { // rotates to a new segment 3
				t.Fatal(err)
			}
			cut2 := cut1.crashClone() // the second cut, the Put returned
			defer cut2.release()
			listing := cut2.listing("/q/cursors/n")
			l.Close()
			var logs lockedBuffer
			opts.fsForTesting = cut2
			opts.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
			l, err = OpenLog("/q", opts)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if c, err = l.Cursor("n", FromOldest()); err != nil {
				t.Fatal(err)
			}
			var got []uint64
			for {
				rec, err := c.Read(done)
				if err != nil {
					break
				}
				got = append(got, rec.Seq)
			}
			if len(got) != 1 || got[0] != 3 {
				t.Errorf("cursor n after the second cut delivers %v, want [3]\ncursor n's files at the cut:%s\nwarnings:\n%s", got, listing, logs.String())
			}
		})
	}
}

// TestRetiredBitmapFsyncedWithItsName: a bitmap the floor passes while it
// owes an fsync is closed and handed to the writer goroutine, whose next
// round fsyncs it (retirePassed), tick or not. A named cursor's bitmaps
// live in its own directory, which only syncAcks fsynced (newFiles): one
// made since the last tick (here by the cursor's registration, segment 0
// active) was fsynced with its acknowledgements while its name was still
// not durable, and a power cut there lost them with it: records 0..2,
// acknowledged before that fsync, were delivered again. A second cursor
// that reads nothing keeps segment 0 from being deleted.
func TestRetiredBitmapFsyncedWithItsName(t *testing.T) {
	for _, kind := range memFSKinds() {
		t.Run(kind.name, func(t *testing.T) {
			mfs := kind.new(t)
			ctx := context.Background()
			done, cancel := context.WithCancel(ctx)
			cancel()
			opts, l, cs := namedCursorsLog(t, mfs, "n", "m")
			n := cs[0]
			var cut *memFS
			ack0 := "/q/cursors/n/" + segmentName(0, ackSuffix)
			mfs.locked(func() {
				mfs.onSync = func(op, name string, _ bool) {
					if op == "fsync" && name == ack0 && cut == nil {
						cut = mfs.crashCloneLocked() // the power cut
					}
				}
			})
			readAcking(t, n, 3, nil)            // the floor passes segment 0
			if err := l.Sync(ctx); err != nil { // a round: retirePassed
				t.Fatal(err)
			}
			var c *memFS
			mfs.locked(func() { c, mfs.onSync = cut, nil })
			l.Close()
			if c == nil {
				t.Fatal("no fsync of cursor n's bitmap of segment 0")
			}
			defer c.release()
			listing := c.listing("/q/cursors/n")
			opts.fsForTesting = c
			l, err := OpenLog("/q", opts)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if n, err = l.Cursor("n", FromOldest()); err != nil {
				t.Fatal(err)
			}
			var got []uint64
			for {
				rec, err := n.Read(done)
				if err != nil {
					break
				}
				got = append(got, rec.Seq)
			}
			if len(got) != 1 || got[0] != 3 {
				t.Errorf("after a power cut at the fsync of its bitmap of segment 0, cursor n delivers %v, want [3]: 0..2 were acknowledged before it\ncursor n's files at the cut:%s", got, listing)
			}
		})
	}
}

// TestLaterBitmapDurableBeforeEarlierReadEnd: a power cut on a real disk
// can leave a later segment's bitmap durable (the kernel wrote its dirty
// page back, or a round fsynced it as retired) while an earlier one still
// holds the header it was made with, readEnd 0, the raise of it by the
// reader lost. Open counted acknowledgements only up to the first bitmap
// whose readEnd said it was never read, so the later one's were not
// counted: its records came again, their Acks failed as already
// acknowledged, and Depth never came back to 0.
func TestLaterBitmapDurableBeforeEarlierReadEnd(t *testing.T) {
	for _, kind := range memFSKinds() {
		t.Run(kind.name, func(t *testing.T) {
			mfs, opts, q := fixedQueue(t, kind)
			putFixed(t, q, 9) // segments 0, 3 and 6
			done, cancel := context.WithCancel(context.Background())
			cancel()
			readAcking(t, q, 7, func(seq uint64) bool { return seq >= 3 }) // 0..2 stay in flight; 3..6 finished
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
			// The state the cut leaves: segment 0's bitmap as made, readEnd 0.
			f, err := mfs.OpenFile("/q/"+segmentName(0, ackSuffix), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(make([]byte, 8), 16); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			f.Close()

			if q, err = Open("/q", opts); err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			if d := q.Depth(); d != 5 {
				t.Errorf("Depth after Open = %d, want 5 (0..2 and 7..8)", d)
			}
			var got []uint64
			for {
				rec, err := q.Read(done)
				if err != nil {
					break
				}
				got = append(got, rec.Seq)
				if err := q.Ack(rec.Seq); err != nil {
					t.Errorf("Ack(%d): %v", rec.Seq, err)
				}
			}
			if want := []uint64{0, 1, 2, 7, 8}; !slices.Equal(got, want) {
				t.Errorf("delivered %v after Open, want %v: 3..6 were acknowledged", got, want)
			}
			if d := q.Depth(); d != 0 {
				t.Errorf("Depth after every record was acknowledged = %d, want 0", d)
			}
		})
	}
}

// TestReadEndDurablePastTheFirstPage: the bits of a bitmap's first 32,512
// records share the page its header is on, the others are on pages of
// their own, which the kernel may write back before the header's. A power
// cut could keep bits past a readEnd it lost: Open did not count them, the
// records came again, their Acks were refused and Depth never came back to
// 0 (a review built that cut by hand). The raise of readEnd past the first
// page is now fsynced before a record past it is handed out; here no sync
// tick comes, and the cut keeps only what was fsynced.
func TestReadEndDurablePastTheFirstPage(t *testing.T) {
	for _, kind := range memFSKinds() {
		t.Run(kind.name, func(t *testing.T) {
			mfs := kind.new(t)
			q, err := Open("/q", Options{SyncEvery: 1 << 30, SyncInterval: time.Hour, fsForTesting: mfs})
			if err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			ctx := context.Background()
			n := int(firstPageRecords) + 100
			for range n {
				if err := q.Put(ctx, []byte("x")); err != nil {
					t.Fatal(err)
				}
			}
			done, cancel := context.WithCancel(ctx)
			cancel()
			for range n {
				if _, err := q.Read(done); err != nil {
					t.Fatal(err)
				}
			}
			mfs.SyncDir("/q") // the bitmap's name durable, as any later directory fsync makes it
			cut := mfs.crashClone()
			defer cut.release()
			f, err := cut.OpenFile("/q/"+segmentName(0, ackSuffix), os.O_RDONLY, 0)
			if err != nil {
				t.Fatalf("the bitmap of segment 0 after the cut: %v", err)
			}
			defer f.Close()
			head := make([]byte, ackHeaderSize)
			if _, err := f.ReadAt(head, 0); err != nil {
				t.Fatal(err)
			}
			if readEnd, _, err := decodeAckHeader(head, 0); err != nil || readEnd < uint64(n) {
				t.Errorf("after %d records were handed out, the durable readEnd is %d (%v): bits past the first page (%d records) could reach the disk ahead of it", n, readEnd, err, firstPageRecords)
			}
		})
	}
}
