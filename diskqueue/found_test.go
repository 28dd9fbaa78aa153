package diskqueue

import (
	"bytes"
	"context"
	"fmt"
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
