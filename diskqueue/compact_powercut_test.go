package diskqueue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// compactCut is the state of a memFS at one moment of a compaction: as a
// power cut there would leave it, or as a kill of the process would.
type compactCut struct {
	what  string
	point string // the crash point, if at one
	fs    *memFS
	kill  bool
}

// Compaction survives a crash at every step: a power cut at every fsync
// and directory fsync while compacting, and a power cut and a kill of the
// process at each named step (CompactCrashPoints). Whatever the moment,
// the log opens cleanly with no compaction file left; each compacted
// segment is either the old one or the new one, whole (never a mix: of
// the records the compaction removed, ReadAt finds all or none); every
// record kept is readable with ReadAt, Scan and the cursor, with its body;
// nothing is corrupt; Verify finds nothing wrong; and the cursor delivers
// every record kept that it had not acknowledged (after a kill, none it
// had). Two compactions run: a segment's first (version 1 to 2) and one of
// a segment compacted before (2 to 2).
func TestCompactCrashAtEveryStep(t *testing.T) {
	for _, kind := range memFSKinds() {
		t.Run(kind.name, func(t *testing.T) {
			mfs := kind.new(t)
			var cuts []compactCut
			compacting := false
			mfs.OnSync = func(op, name string, changed bool) {
				if compacting && changed {
					cuts = append(cuts, compactCut{what: fmt.Sprintf("power cut after %s %s", op, filepath.Base(name)), fs: mfs.CrashCloneLocked()})
				}
			}
			points := map[string]int{}
			opts := Options{SyncEvery: 1, MaxSegmentBytes: 512, FS: mfs}
			opts.crashPointForTesting = func(p string) {
				if !strings.HasPrefix(p, "compact-") {
					return
				}
				points[p]++
				mfs.Locked(func() {
					cuts = append(cuts,
						compactCut{what: "power cut at " + p, point: p, fs: mfs.CrashCloneLocked()},
						compactCut{what: "kill at " + p, point: p, fs: mfs.KillCloneLocked(), kill: true})
				})
			}
			l, err := OpenLog("/q", opts)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			c, err := l.Cursor("c", FromOldest())
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			const n = 90
			for i := 0; i < n; i++ {
				if err := l.Put(ctx, compactTestBody(uint64(i))); err != nil {
					t.Fatal(err)
				}
			}
			if err := l.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			// Hand out the first records, acknowledging every other one.
			acked := map[uint64]bool{}
			for i := 0; i < 8; i++ {
				rec, err := c.Read(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if i%2 == 0 {
					if err := c.Ack(rec.Seq); err != nil {
						t.Fatal(err)
					}
					acked[rec.Seq] = true
				}
			}
			sealed := sealedSegs(l)
			if len(sealed) < 3 {
				t.Fatalf("%d sealed segments, want 3", len(sealed))
			}
			type step struct {
				seg  SegmentInfo
				keep func(seq uint64) bool
			}
			// The first segment (with records in flight), then a later one
			// twice: once from version 1, once more from version 2.
			steps := []step{
				{sealed[0], func(seq uint64) bool { return seq%2 == 0 }},
				{sealed[2], func(seq uint64) bool { return seq%3 != 1 }},
				{sealed[2], func(seq uint64) bool { return seq%3 == 0 }},
			}
			checked := 0
			everRemoved := map[uint64]bool{} // seqs some compaction finished removing before the cut
			for _, s := range steps {
				// Under the file system's lock, as onSync reads it and
				// appends to cuts from the writer's goroutine.
				var before int
				mfs.Locked(func() { before, compacting = len(cuts), true })
				st, err := l.Compact(ctx, s.seg.Base, func(rec Record) bool { return s.keep(rec.Seq) })
				mfs.Locked(func() { compacting = false })
				if err != nil || st.Removed == 0 {
					t.Fatalf("Compact(%d): %+v, %v", s.seg.Base, st, err)
				}
				var now []uint64
				for seq := s.seg.Base; seq < s.seg.End; seq++ {
					if !s.keep(seq) && !everRemoved[seq] {
						now = append(now, seq)
					}
				}
				outcomes := map[bool]int{}
				checked += len(cuts) - before
				for _, cut := range cuts[before:] {
					compacted := checkCompactCut(t, cut, kind, n, acked, everRemoved, now)
					outcomes[compacted]++
					// Before the marker the old segment stands; from it on, the new.
					if cut.point != "" {
						wantNew := cut.point != "compact-writing" && cut.point != "compact-written"
						if compacted != wantNew {
							t.Errorf("%s: compacted %v, want %v", cut.what, compacted, wantNew)
						}
					}
					cut.fs.Release()
				}
				if outcomes[false] == 0 || outcomes[true] == 0 {
					t.Errorf("compaction of %d: %d cuts left the old segment, %d the new; want some of each", s.seg.Base, outcomes[false], outcomes[true])
				}
				cuts = cuts[:before]
				for _, seq := range now {
					everRemoved[seq] = true
				}
			}
			t.Logf("%d cuts checked", checked)
			for _, p := range CompactCrashPoints {
				if points[p] != len(steps) {
					t.Errorf("crash point %s passed %d times, want %d", p, points[p], len(steps))
				}
			}
		})
	}
}

// checkCompactCut opens the log a cut left and checks it (see
// TestCompactCrashAtEveryStep). removed were removed before the
// compaction the cut interrupted; pending are what it removes.
func checkCompactCut(t *testing.T, cut compactCut, kind memFSKind, n uint64, acked, removed map[uint64]bool, pending []uint64) (compacted bool) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%s: %s", cut.what, fmt.Sprintf(format, args...))
	}
	opts := Options{SyncEvery: 1, MaxSegmentBytes: 512, FS: cut.fs}
	l, err := OpenLog("/q", opts)
	if err != nil {
		fail("open: %v", err)
	}
	defer l.Close()
	if entries, _ := cut.fs.ReadDir("/q"); slices.ContainsFunc(entries, func(e fs.DirEntry) bool { return strings.HasSuffix(e.Name(), compactSuffix) }) {
		fail("Open left compaction files: %v", entries)
	}
	isPending := func(seq uint64) bool { _, ok := slices.BinarySearch(pending, seq); return ok }
	found := 0 // of pending, how many ReadAt still finds
	for seq := uint64(0); seq < n; seq++ {
		rec, err := l.ReadAt(seq)
		switch {
		case removed[seq] || isPending(seq) && errors.Is(err, ErrCompacted):
			if !errors.Is(err, ErrCompacted) {
				fail("ReadAt(%d) of a record removed before the cut: %q, %v", seq, rec.Body, err)
			}
		case err != nil:
			fail("ReadAt(%d): %v", seq, err)
		case !bytes.Equal(rec.Body, compactTestBody(seq)):
			fail("ReadAt(%d) = %q", seq, rec.Body)
		case isPending(seq):
			found++
		}
	}
	if found != 0 && found != len(pending) {
		fail("of the %d records the compaction removes, %d are there: a mix of the old segment and the new", len(pending), found)
	}
	gone := func(seq uint64) bool { return removed[seq] || isPending(seq) && found == 0 }
	want := uint64(0)
	for rec, err := range l.Scan(0, n) {
		if err != nil {
			fail("Scan: %v", err)
		}
		for gone(want) {
			want++
		}
		if rec.Seq != want || !bytes.Equal(rec.Body, compactTestBody(rec.Seq)) {
			fail("Scan yields %d %q, want %d", rec.Seq, rec.Body, want)
		}
		want++
	}
	for gone(want) && want < n {
		want++
	}
	if want != n {
		fail("Scan stops at %d of %d", want, n)
	}
	c, err := l.Cursor("c", FromOldest())
	if err != nil {
		fail("cursor: %v", err)
	}
	done, cancel := context.WithCancel(context.Background())
	cancel()
	next := uint64(0)
	for {
		rec, err := c.Read(done)
		if errors.Is(err, context.Canceled) {
			break
		}
		if err != nil {
			fail("Read: %v", err)
		}
		for next < rec.Seq {
			if !gone(next) && !acked[next] {
				fail("the cursor skipped record %d", next)
			}
			next++
		}
		if gone(rec.Seq) || cut.kill && acked[rec.Seq] || !bytes.Equal(rec.Body, compactTestBody(rec.Seq)) {
			fail("the cursor delivers %d %q (removed %v, acknowledged %v)", rec.Seq, rec.Body, gone(rec.Seq), acked[rec.Seq])
		}
		next = rec.Seq + 1
	}
	if next != n {
		fail("the cursor stops at %d of %d", next, n)
	}
	if st := l.Stats(); st.CorruptRecords != 0 {
		fail("%d corrupt records", st.CorruptRecords)
	}
	if c.Depth() != c.Stats().InFlight {
		fail("Depth %d, %d in flight, after reading everything", c.Depth(), c.Stats().InFlight)
	}
	l.Close()
	rep, err := verify("/q", Options{FS: cut.fs})
	// memFS's ReadDir lists no directories, so Verify finds no named
	// cursor and says the log has none: not what is checked here.
	problems := slices.DeleteFunc(rep.Problems, func(p Problem) bool { return strings.Contains(p.Err.Error(), "no valid cursor") })
	if err != nil || len(problems) > 0 {
		fail("Verify: %v, %v", problems, err)
	}
	return found == 0
}
