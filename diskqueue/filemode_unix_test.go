//go:build unix

package diskqueue_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spillq/spillq/internal/modetest"

	"github.com/spillq/spillq/diskqueue"
)

// scribble overwrites the file at path from off with b.
func scribble(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// TestFileModes makes every kind of file a queue has (segments, indexes,
// bitmaps, cursors and a named cursor's directory, the lock, the spare
// segment, a compacted segment, a rebuilt index, a .bad copy of damaged
// records) under a umask that takes nothing away,
// and checks each has FileMode and each directory the mode derived from
// it.
func TestFileModes(t *testing.T) {
	modetest.ZeroUmask(t)
	for _, c := range []struct {
		mode      fs.FileMode
		file, dir fs.FileMode
	}{
		{0, 0o600, 0o700}, // the default: the owner alone
		{0o640, 0o640, 0o750},
		{0o660, 0o660, 0o770},
		{0o644, 0o644, 0o755},
	} {
		t.Run(c.file.String(), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "queue", "q") // a parent made by Open too
			opts := diskqueue.Options{MaxSegmentBytes: 400, SyncEvery: 1, FileMode: c.mode}
			l, err := diskqueue.OpenLog(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.Cursor("c", diskqueue.FromOldest()); err != nil {
				t.Fatal(err)
			}
			putN(t, l, 0, 60)
			segs := l.Segments()
			if len(segs) < 5 {
				t.Fatalf("%d segments, want at least 5", len(segs))
			}
			if _, err := l.Compact(context.Background(), segs[1].Base, func(r diskqueue.Record) bool { return r.Seq%2 == 0 }); err != nil {
				t.Fatal(err)
			}
			if err := l.Close(); err != nil {
				t.Fatal(err)
			}
			// A reader copies the third segment's damaged first record
			// aside, and the fourth's index is rebuilt (written anew).
			scribble(t, segFile(dir, segs[2].Base, "log"), 16, []byte{0x7f, 0xff, 0, 1, 2, 3, 4})
			if err := os.Remove(segFile(dir, segs[3].Base, "index")); err != nil {
				t.Fatal(err)
			}

			l, err = diskqueue.OpenLog(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			cur, err := l.Cursor("c", diskqueue.FromOldest())
			if err != nil {
				t.Fatal(err)
			}
			done, cancel := context.WithCancel(context.Background())
			cancel() // drain what is there, without waiting for more
			for {
				_, err := cur.Read(done) // no Ack: the segments stay to be looked at
				if errors.Is(err, context.Canceled) {
					break
				}
				if err != nil {
					t.Fatalf("Read: %v", err)
				}
			}
			if st := l.Stats(); st.BadFiles != 1 || st.IndexRebuilds == 0 {
				t.Fatalf("Stats: %d .bad files, %d index rebuilds; want 1 and some", st.BadFiles, st.IndexRebuilds)
			}
			if err := l.Sync(context.Background()); err != nil {
				t.Fatal(err)
			}
			seen := modetest.Check(t, filepath.Dir(dir), c.file, c.dir)
			all := strings.Join(seen, " ")
			for _, want := range []string{
				"LOCK", "00000000000000000020.log.16.bad", "00000000000000000030.index", ".timeindex",
				"00000000000000000010.log", // compacted
				"cursors/c/00000000000000000000.ack", "cursors/c/cursor", "next.log", "cursors/c/next.ack",
			} {
				if !strings.Contains(all, want) {
					t.Errorf("no %s among the files checked: %v", want, seen)
				}
			}
		})
	}
}

// TestFileModesKeptOnReopen reopens a queue made with other modes (as an
// earlier version made them, one file changed by hand): Open changes
// none, and only the files made from then on get the FileMode of this
// Open.
func TestFileModesKeptOnReopen(t *testing.T) {
	modetest.ZeroUmask(t)
	dir := t.TempDir()
	opts := diskqueue.Options{MaxSegmentBytes: 400, SyncEvery: 1, FileMode: 0o644}
	q := openQueue(t, dir, opts)
	putN(t, q, 0, 20)
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	old := map[string]fs.FileMode{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		old[e.Name()] = 0o644
	}
	first := filepath.Base(segFile(dir, 0, "log"))
	if err := os.Chmod(filepath.Join(dir, first), 0o640); err != nil {
		t.Fatal(err)
	}
	old[first] = 0o640
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}

	opts.FileMode = 0 // the default, 0600
	q = openQueue(t, dir, opts)
	defer q.Close()
	putN(t, q, 20, 40)
	if _, err := q.Cursor("later", diskqueue.FromOldest()); err != nil {
		t.Fatal(err)
	}
	if err := q.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode().Perm() != 0o755 {
		t.Errorf("the queue's directory: mode %v, want its own 0755 kept", info.Mode())
	}
	var kept, made int
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		want, existed := old[rel]
		switch {
		case existed:
			kept++
		case d.IsDir():
			want = 0o700
			made++
		default:
			want = 0o600
			made++
		}
		if info.Mode().Perm() != want {
			t.Errorf("%s: mode %v (%#o), want %#o", rel, info.Mode(), uint32(info.Mode().Perm()), uint32(want))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if kept < 5 || made < 5 {
		t.Fatalf("%d files kept and %d made; the test wants more of both", kept, made)
	}
}

// TestFileModeInvalid refuses modes a queue cannot work with or that are
// not plain permissions, before it makes anything.
func TestFileModeInvalid(t *testing.T) {
	for _, mode := range []fs.FileMode{0o400, 0o200, 0o700, 0o640 | 0o100, 0o600 | fs.ModeSetuid, 0o600 | fs.ModeSticky, 0o600 | fs.ModeDir} {
		dir := filepath.Join(t.TempDir(), "q")
		q, err := diskqueue.Open(dir, diskqueue.Options{FileMode: mode})
		if !errors.Is(err, diskqueue.ErrInvalidOptions) {
			if q != nil {
				q.Close()
			}
			t.Fatalf("FileMode %v: got %v, want ErrInvalidOptions", mode, err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("FileMode %v refused, yet the directory was made (%v)", mode, err)
		}
	}
}
