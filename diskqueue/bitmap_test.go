package diskqueue

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"
)

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
// Found by a review of the crash recovery.
func TestPowerCutShortBitmap(t *testing.T) {
	for _, kind := range memFSKinds() {
		t.Run(kind.name, func(t *testing.T) {
			mfs := kind.new(t)
			ctx := context.Background()
			opts := Options{SyncEvery: 1 << 30, SyncInterval: time.Hour, FS: mfs}
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
			ackReady(t, q)
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
			cut := mfs.CrashClone()
			defer cut.Release()
			listing := listing(cut, "/q")
			q.Close()
			opts.FS = cut
			q, err = Open("/q", opts)
			if err != nil {
				t.Fatalf("open after the cut: %v\nfiles at the cut:%s", err, listing)
			}
			defer q.Close()
			n := ackReady(t, q)
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
// Found by a review of the crash recovery.
func TestPowerCutEmptyBitmaps(t *testing.T) {
	for _, kind := range memFSKinds() {
		t.Run(kind.name, func(t *testing.T) {
			mfs := kind.new(t)
			opts := Options{MaxSegmentBytes: threePerSegment, SyncEvery: 1, FS: mfs}
			q, err := Open("/q", opts)
			if err != nil {
				t.Fatal(err)
			}
			putFixed(t, q, 4)
			cut := mfs.CrashClone()
			defer cut.Release()
			listing := listing(cut, "/q")
			q.Close()
			// Verify, before Open repairs anything, agrees with Open: the
			// empty bitmaps, and the last segment's indexes (never fsynced
			// before it is sealed), are no damage.
			if rep, err := verify("/q", Options{FS: cut}); err != nil || len(rep.Problems) > 0 {
				t.Errorf("Verify after the cut: %v, problems %v\nfiles at the cut:%s", err, rep.Problems, listing)
			}
			var logs lockedBuffer
			opts.FS = cut
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
			q, err := Open("/q", Options{SyncEvery: 1 << 30, SyncInterval: time.Hour, FS: mfs})
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
			cut := mfs.CrashClone()
			defer cut.Release()
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
