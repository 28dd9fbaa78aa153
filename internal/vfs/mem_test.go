package vfs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

// write creates (or truncates) name in fsys with b, and syncs it if sync.
func write(t *testing.T, fsys FS, name string, b string, sync bool) {
	t.Helper()
	f, err := fsys.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte(b), 0); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
}

// content is name's bytes in fsys, or "<absent>".
func content(t *testing.T, fsys FS, name string) string {
	t.Helper()
	b, err := ReadFile(fsys, name)
	if errors.Is(err, fs.ErrNotExist) {
		return "<absent>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestCrashCloneKeepsWhatWasSynced: a power cut keeps a file's bytes as of
// its last fsync, under the names its directory had at its last fsync,
// and nothing else; a kill keeps everything written.
func TestCrashCloneKeepsWhatWasSynced(t *testing.T) {
	m := NewCrashableMem()
	if err := m.MkdirAll("/d/sub", 0o700); err != nil {
		t.Fatal(err)
	}
	write(t, m, "/d/a", "a1", true)
	if got := content(t, m.CrashClone(), "/d/a"); got != "<absent>" {
		t.Fatalf("a file fsynced in a directory never fsynced survived a power cut: %q", got)
	}
	if got := content(t, m.KillClone(), "/d/a"); got != "a1" {
		t.Fatalf("after a kill the file holds %q, want a1", got)
	}
	if err := m.SyncDir("/d"); err != nil {
		t.Fatal(err)
	}
	if got := content(t, m.CrashClone(), "/d/a"); got != "a1" {
		t.Fatalf("after the directory's fsync a power cut leaves %q, want a1", got)
	}
	write(t, m, "/d/a", "a2 unsynced", false)
	if got := content(t, m.CrashClone(), "/d/a"); got != "a1" {
		t.Fatalf("a power cut kept bytes never fsynced: %q", got)
	}
	if got := content(t, m.KillClone(), "/d/a"); got != "a2 unsynced" {
		t.Fatalf("a kill lost bytes written: %q", got)
	}

	// The atomic replace: temporary file, fsync, rename, directory fsync.
	write(t, m, "/d/a.tmp", "a3", true)
	if err := m.Rename("/d/a.tmp", "/d/a"); err != nil {
		t.Fatal(err)
	}
	cut := m.CrashClone()
	if got := content(t, cut, "/d/a"); got != "a1" {
		t.Fatalf("a rename not yet made durable: a power cut leaves %q, want the old a1", got)
	}
	if got := content(t, cut, "/d/a.tmp"); got != "<absent>" {
		t.Fatalf("a power cut kept a name never made durable: %q", got)
	}
	m.SyncDir("/d")
	if got := content(t, m.CrashClone(), "/d/a"); got != "a3" {
		t.Fatalf("after the rename and the directory fsync a power cut leaves %q, want a3", got)
	}

	// A removal is durable at the directory's fsync too.
	if err := m.Remove("/d/a"); err != nil {
		t.Fatal(err)
	}
	if got := content(t, m.CrashClone(), "/d/a"); got != "a3" {
		t.Fatalf("a removal not made durable: a power cut leaves %q, want a3", got)
	}
	m.SyncDir("/d")
	if got := content(t, m.CrashClone(), "/d/a"); got != "<absent>" {
		t.Fatalf("a durable removal: a power cut leaves %q", got)
	}

	// A clone is a file system of its own: a power cut of it keeps what it
	// had, whatever happens to m after.
	write(t, m, "/d/b", "b1", true)
	m.SyncDir("/d")
	cut = m.CrashClone()
	write(t, m, "/d/b", "b2", true)
	if got := content(t, cut, "/d/b"); got != "b1" {
		t.Fatalf("a clone saw a later fsync of the original: %q", got)
	}
	write(t, cut, "/d/b", "b-clone", true)
	if got := content(t, m, "/d/b"); got != "b2" {
		t.Fatalf("the original saw a write to its clone: %q", got)
	}
	if got := content(t, cut.CrashClone(), "/d/b"); got != "b-clone" {
		t.Fatalf("a power cut of the clone leaves %q, want b-clone", got)
	}
}

// TestOnSyncCutsInsideTheSync: OnSync runs under the lock at every fsync,
// so a clone made there is the state that very fsync left.
func TestOnSyncCutsInsideTheSync(t *testing.T) {
	m := NewCrashableMem()
	m.MkdirAll("/d", 0o700)
	var ops []string
	var cuts []*MemFS
	m.OnSync = func(op, name string, changed bool) {
		if changed {
			ops = append(ops, op+" "+name)
			cuts = append(cuts, m.CrashCloneLocked())
		}
	}
	write(t, m, "/d/f", "x", true)
	m.SyncDir("/d")
	m.SyncDir("/d") // nothing changed
	if want := []string{"fsync /d/f", "dirsync /d"}; !slices.Equal(ops, want) {
		t.Fatalf("OnSync saw %q, want %q", ops, want)
	}
	if got := content(t, cuts[0], "/d/f"); got != "<absent>" {
		t.Fatalf("the cut at the file's fsync has %q", got)
	}
	if got := content(t, cuts[1], "/d/f"); got != "x" {
		t.Fatalf("the cut at the directory's fsync has %q", got)
	}
}

// TestMemFSAsTheOS: the calls the queue makes behave on a MemFS as on the
// OS: the errors they return, what ReadDir lists, Stat of a directory,
// Remove and RemoveAll, and a second Lock.
func TestMemFSAsTheOS(t *testing.T) {
	for _, c := range []struct {
		name string
		fsys FS
		root string
	}{{"os", OS, t.TempDir()}, {"mem", NewCrashableMem(), "/r"}} {
		t.Run(c.name, func(t *testing.T) {
			fsys, d := c.fsys, filepath.Join(c.root, "d")
			if err := fsys.MkdirAll(filepath.Join(d, "sub"), 0o700); err != nil {
				t.Fatal(err)
			}
			write(t, fsys, filepath.Join(d, "f"), "hello", false)
			if _, err := fsys.OpenFile(filepath.Join(d, "missing"), os.O_RDONLY, 0); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("open of a missing file: %v, want ErrNotExist", err)
			}
			if _, err := fsys.OpenFile(filepath.Join(d, "nodir", "f"), os.O_RDWR|os.O_CREATE, 0o600); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("create in a missing directory: %v, want ErrNotExist", err)
			}
			info, err := fsys.Stat(filepath.Join(d, "sub"))
			if err != nil || !info.IsDir() {
				t.Errorf("Stat of a directory: %v, %v", info, err)
			}
			if info, err := fsys.Stat(filepath.Join(d, "f")); err != nil || info.IsDir() || info.Size() != 5 {
				t.Errorf("Stat of a file: %v, %v", info, err)
			}
			entries, err := fsys.ReadDir(d)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, e := range entries {
				names = append(names, e.Name()+map[bool]string{true: "/"}[e.IsDir()])
			}
			if want := []string{"f", "sub/"}; !slices.Equal(names, want) {
				t.Errorf("ReadDir lists %q, want %q", names, want)
			}
			if err := fsys.Remove(d); !errors.Is(err, syscall.ENOTEMPTY) && !errors.Is(err, syscall.EEXIST) {
				t.Errorf("Remove of a directory that is not empty: %v, want ENOTEMPTY", err)
			}
			if err := fsys.Remove(filepath.Join(d, "sub")); err != nil {
				t.Errorf("Remove of an empty directory: %v", err)
			}
			lock := filepath.Join(d, "lock")
			l, err := fsys.Lock(lock, 0o600)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := fsys.Lock(lock, 0o600); !errors.Is(err, ErrLocked) {
				t.Errorf("a second Lock: %v, want ErrLocked", err)
			}
			l.Close()
			if l, err := fsys.Lock(lock, 0o600); err != nil {
				t.Errorf("Lock after the holder closed it: %v", err)
			} else {
				l.Close()
			}
			if err := fsys.RemoveAll(d); err != nil {
				t.Fatal(err)
			}
			if _, err := fsys.Stat(d); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("Stat after RemoveAll: %v, want ErrNotExist", err)
			}
			if err := fsys.RemoveAll(d); err != nil {
				t.Errorf("RemoveAll of what is gone: %v", err)
			}
		})
	}
}

// TestRemoveAllIsDurable: a directory removed with everything in it stays
// removed through a power cut, and one made again in its place starts
// empty.
func TestRemoveAllIsDurable(t *testing.T) {
	m := NewCrashableMem()
	m.MkdirAll("/q/ch/x", 0o700)
	write(t, m, "/q/ch/x/f", "f", true)
	m.SyncDir("/q/ch/x")
	if err := m.RemoveAll("/q/ch/x"); err != nil {
		t.Fatal(err)
	}
	cut := m.CrashClone()
	if _, err := cut.Stat("/q/ch/x"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("after a power cut the removed directory: %v", err)
	}
	m.MkdirAll("/q/ch/x", 0o700)
	if got := content(t, m.CrashClone(), "/q/ch/x/f"); got != "<absent>" {
		t.Fatalf("a directory made again in a removed one's place holds its file: %q", got)
	}
}
