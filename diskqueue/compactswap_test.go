package diskqueue

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// A compaction whose swap fails after renaming the new files into place
// leaves this process on the old generation's handles. Once the cache
// gives that generation back, the segment is opened again by path, which
// now names the compacted files: reopenEvicted must not take them for the
// old, uncompacted generation.
func TestReopenAfterFailedSwap(t *testing.T) {
	for _, kind := range []opKind{opSyncDir, opRename} {
		t.Run(string(kind), func(t *testing.T) {
			efs := &errorFS{}
			dir := t.TempDir()
			const n = 300
			l := compactFixture(t, dir, efs, n, Options{SyncEvery: 1, openSealedForTesting: 1})
			defer l.Close()
			if _, err := l.Cursor("r", FromOldest()); err != nil {
				t.Fatal(err)
			}
			sealed := sealedSegs(l)
			if len(sealed) < 4 {
				t.Fatalf("%d sealed", len(sealed))
			}
			target := sealed[1]
			// Open the target's files (first generation, checked).
			if _, err := l.ReadAt(target.Base); err != nil {
				t.Fatal(err)
			}
			nth := 2 // the marker's directory fsync, then the swap's
			if kind == opRename {
				nth = 3 // the marker, the log, then the index
			}
			efs.Arm(kind, nth, syscall.EIO, false)
			_, err := l.Compact(context.Background(), target.Base, func(r Record) bool { return r.Seq%2 == 0 })
			efs.Heal()
			t.Logf("Compact: %v", err)
			if err == nil {
				t.Fatal("the fault did not hit the swap")
			}
			// Give the target's generation back: read the other segments.
			for _, s := range sealed {
				if s.Base != target.Base {
					if _, err := l.ReadAt(s.Base); err != nil {
						t.Fatal(err)
					}
				}
			}
			for seq := target.Base; seq < target.End; seq++ {
				rec, err := l.ReadAt(seq)
				switch {
				case seq%2 == 1 && errors.Is(err, ErrCompacted):
				case err != nil || rec.Seq != seq || !bytes.Equal(rec.Body, compactTestBody(seq)):
					t.Fatalf("ReadAt(%d) after the failed swap and a reopen: seq %d %q, %v", seq, rec.Seq, rec.Body, err)
				}
			}
		})
	}
}

// The same through a cursor: records the compaction kept must all come.
func TestReadAfterFailedSwap(t *testing.T) {
	efs := &errorFS{}
	dir := t.TempDir()
	const n = 300
	l := compactFixture(t, dir, efs, n, Options{SyncEvery: 1, openSealedForTesting: 1})
	defer l.Close()
	c, err := l.Cursor("r", FromOldest())
	if err != nil {
		t.Fatal(err)
	}
	sealed := sealedSegs(l)
	target := sealed[1]
	if _, err := l.ReadAt(target.Base); err != nil {
		t.Fatal(err)
	}
	efs.Arm(opSyncDir, 2, syscall.EIO, false)
	_, err = l.Compact(context.Background(), target.Base, func(r Record) bool { return r.Seq%2 == 0 })
	efs.Heal()
	if err == nil {
		t.Fatal("the fault did not hit the swap")
	}
	for _, s := range sealed {
		if s.Base != target.Base {
			l.ReadAt(s.Base)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := map[uint64]bool{}
	for len(got) < n {
		rec, err := c.Read(ctx)
		if err != nil {
			var d *damageError
			if errors.As(err, &d) {
				t.Logf("damage: %v", err)
				continue
			}
			break
		}
		if !bytes.Equal(rec.Body, compactTestBody(rec.Seq)) {
			t.Fatalf("seq %d: wrong body %q", rec.Seq, rec.Body)
		}
		got[rec.Seq] = true
		c.Ack(rec.Seq)
		if rec.Seq == n-1 {
			break
		}
	}
	for seq := uint64(0); seq < n; seq++ {
		kept := seq < target.Base || seq >= target.End || seq%2 == 0
		if kept && !got[seq] {
			t.Errorf("seq %d, kept by the compaction, never read", seq)
		}
	}
	if st := l.Stats(); st.CorruptRecords != 0 {
		t.Errorf("%d records counted corrupt", st.CorruptRecords)
	}
}

// copyTree copies the files under src to dst, as they are.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(to, b, 0o644)
	})
}

// TestFinishInterruptedCompaction: Open finishes a compaction a crash
// interrupted once its marker was written, even when the marker is
// damaged (every new file was whole and durable before it was written);
// keeps the old segment, removing the new files, when the new log is not
// the one the marker names or there is no marker; and leaves no
// compaction file behind either way. The crash is a copy of the files
// taken at the moment the marker became durable.
func TestFinishInterruptedCompaction(t *testing.T) {
	src, snap := t.TempDir(), t.TempDir()
	var snapped bool
	var opts Options
	opts.crashPointForTesting = func(p string) {
		if p == "compact-marked" && !snapped {
			snapped = true
			if err := copyTree(src, snap); err != nil {
				t.Error(err)
			}
		}
	}
	l := compactFixture(t, src, nil, 300, opts)
	sealed := sealedSegs(l)
	if len(sealed) < 3 {
		t.Fatalf("%d sealed segments, want 3 or more", len(sealed))
	}
	target := sealed[1]
	if _, err := l.Compact(context.Background(), target.Base, func(r Record) bool { return r.Seq%2 == 0 }); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if !snapped {
		t.Fatal("the compaction never reached compact-marked")
	}
	marker := segmentName(target.Base, compactSuffix)
	newLog := segmentName(target.Base, logSuffix) + compactSuffix
	for _, tc := range []struct {
		name     string
		change   func(dir string) error
		finished bool
	}{
		{"marked", func(string) error { return nil }, true},
		{"damaged marker", func(dir string) error {
			b, err := os.ReadFile(filepath.Join(dir, marker))
			if err != nil {
				return err
			}
			b[20] ^= 0xff
			return os.WriteFile(filepath.Join(dir, marker), b, 0o644)
		}, true},
		{"another new log", func(dir string) error {
			f, err := os.OpenFile(filepath.Join(dir, newLog), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.Write([]byte{0})
			return err
		}, false},
		{"no marker", func(dir string) error { return os.Remove(filepath.Join(dir, marker)) }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := copyTree(snap, dir); err != nil {
				t.Fatal(err)
			}
			if err := tc.change(dir); err != nil {
				t.Fatal(err)
			}
			l, err := OpenLog(dir, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			for seq := target.Base; seq < target.End; seq++ {
				rec, err := l.ReadAt(seq)
				switch {
				case seq%2 == 1 && tc.finished:
					if !errors.Is(err, ErrCompacted) {
						t.Fatalf("ReadAt(%d) of a removed record: %q, %v; want ErrCompacted (compaction finished)", seq, rec.Body, err)
					}
				case err != nil || !bytes.Equal(rec.Body, compactTestBody(seq)):
					t.Fatalf("ReadAt(%d): %q, %v; want the record put", seq, rec.Body, err)
				}
			}
			if left, _ := filepath.Glob(filepath.Join(dir, "*"+compactSuffix)); len(left) > 0 {
				t.Fatalf("compaction files left after Open: %v", left)
			}
		})
	}
}
