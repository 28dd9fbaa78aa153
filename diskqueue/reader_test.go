package diskqueue

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// TestReadPastDeletedSegmentAndTombstones: the reader sits at the end of a
// sealed segment whose last record it just handed out, with tombstones
// after it. Acknowledging that record lets the writer delete the segment
// and the tombstones in one go (removeSegment, which unlike ghostSegment
// does not mark the segment gone). The next Read finds its segment missing
// from the list, takes the first one left for its successor, and reports
// the tombstones' seqs, all acknowledged, as damage ("segments missing"):
// counted in CorruptRecords and logged as skipped damaged records. A Scan
// overtaken by a deletion there yields ErrCorrupt for them the same way.
// Found by TestPowerCutAtEverySync, and fixed with it.
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
// Found by TestPowerCutAtEverySync, and fixed with it.
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
	got := readSeqs(done, q)
	if len(got) != 3 || got[0] != 3 {
		_, statErr := os.Stat(filepath.Join(dir, segmentName(0, ackSuffix)))
		t.Errorf("Read after segment 0 was deleted gave seqs %v, want 3, 4, 5 (1 and 2 were acknowledged before the restart); the deleted segment's acknowledgement file: %v", got, statErr)
	}
}

// TestFileCutUnderneath: another process cutting a segment file short must
// not crash the process. A Put that faults on the mapped log gets an error
// (sticky: the queue can no longer trust its files); a read of the cut log
// reports the damage instead of panicking.
func TestFileCutUnderneath(t *testing.T) {
	dir := t.TempDir()
	// A small segment is preallocated whole at once, so nothing extends
	// the file again after the cut (which would turn it into a hole).
	q := mustOpen(t, dir, Options{MaxSegmentBytes: 8 << 10})
	ctx := context.Background()
	if q.Stats().WritePath != "mmap" {
		t.Skip("the write(2) path has no mapping to fault on; TestWritePathFallback covers it")
	}
	for i := 0; i < 10; i++ {
		if err := q.Put(ctx, faultBody(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Sync(ctx); err != nil { // a writer round: preallocation done
		t.Fatal(err)
	}
	log := filepath.Join(dir, segmentName(0, logSuffix))
	if err := os.Truncate(log, 0); err != nil {
		t.Fatal(err)
	}
	err := q.Put(ctx, []byte("into the cut file"))
	if !errors.Is(err, errFault) {
		t.Fatalf("Put into a log cut to zero: got %v, want the mapping fault as an error", err)
	}
	if err := q.Put(ctx, []byte("after")); !errors.Is(err, errFault) {
		t.Fatalf("Put after a fault: got %v, want the sticky fault", err)
	}
	// Reads fault on the mapping and go over to pread: the cut records are
	// reported, never served.
	done, cancel := context.WithCancel(ctx)
	cancel()
	if got := readSeqs(done, q); len(got) > 0 {
		t.Fatalf("Read served seqs %v from a log cut to zero", got)
	}
	q.Close()
}

// TestRecordsOverTheOpenersLimit: MaxRecordBytes is not in the files, so a
// log opened with a smaller limit than it was written under (a tool with
// the defaults; a spillq queue's records are its bodies in envelopes,
// larger than the body limit) must still read, look up, scan and verify
// every record. It did not: readers took a length over
// max(MaxRecordBytes, 1 MiB) for damage, and a tool draining such a queue
// dropped the record as damaged.
func TestRecordsOverTheOpenersLimit(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	big := bytes.Repeat([]byte("b"), DefaultMaxRecordBytes+100)
	bodies := [][]byte{[]byte("small before"), big, []byte("small after")}
	q := mustOpen(t, dir, Options{MaxRecordBytes: 2 * DefaultMaxRecordBytes})
	for _, b := range bodies {
		if err := q.Put(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := Verify(dir)
	if err != nil || len(rep.Problems) > 0 {
		t.Fatalf("Verify: %v, problems %v", err, rep.Problems)
	}
	for _, readOnly := range []bool{true, false} {
		var q *Queue
		if readOnly {
			q, err = OpenReadOnly(dir, Options{})
		} else {
			q, err = Open(dir, Options{})
		}
		if err != nil {
			t.Fatal(err)
		}
		rec, err := q.ReadAt(1)
		if err != nil || !bytes.Equal(rec.Body, big) {
			t.Fatalf("readOnly %v: ReadAt(1): %d bytes, %v", readOnly, len(rec.Body), err)
		}
		n := 0
		for rec, err := range q.Scan(0, 3) {
			if err != nil || !bytes.Equal(rec.Body, bodies[n]) {
				t.Fatalf("readOnly %v: Scan record %d: %d bytes, %v", readOnly, n, len(rec.Body), err)
			}
			n++
		}
		if !readOnly {
			for i, want := range bodies {
				rec, err := q.Read(ctx)
				if err != nil || !bytes.Equal(rec.Body, want) {
					t.Fatalf("Read %d: %d bytes, %v", i, len(rec.Body), err)
				}
				if err := q.Ack(rec.Seq); err != nil {
					t.Fatal(err)
				}
			}
			if st := q.Stats(); st.CorruptRecords != 0 {
				t.Fatalf("CorruptRecords %d", st.CorruptRecords)
			}
		}
		q.Close()
	}
}
