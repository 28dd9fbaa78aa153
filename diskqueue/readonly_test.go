package diskqueue

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

// dirDigest is every file's name and bytes, to show a read-only open
// changed nothing.
func dirDigest(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		b, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		out[e.Name()] = b
	}
	return out
}

func TestOpenReadOnlyBesideAWriter(t *testing.T) {
	dir := t.TempDir()
	q := mustOpen(t, dir, Options{MaxSegmentBytes: 1 << 10})
	defer q.Close()
	ctx := context.Background()
	for i := 0; i < 100; i++ {
		q.Put(ctx, faultBody(i))
	}
	q.Sync(ctx)
	before := dirDigest(t, dir)
	ro, err := OpenReadOnly(dir, Options{})
	if err != nil {
		t.Fatalf("OpenReadOnly while the queue is open elsewhere: %v", err)
	}
	defer ro.Close()
	for i := 0; i < 100; i++ {
		rec, err := ro.ReadAt(uint64(i))
		if err != nil || !bytes.Equal(rec.Body, faultBody(i)) {
			t.Fatalf("ReadAt(%d): %q, %v", i, rec.Body, err)
		}
	}
	if err := ro.Put(ctx, []byte("x")); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Put: %v", err)
	}
	if err := ro.Empty(); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("Empty: %v", err)
	}
	after := dirDigest(t, dir)
	for name, b := range before {
		if !bytes.Equal(after[name], b) {
			t.Fatalf("read-only open changed %s", name)
		}
	}
}

// TestOpenReadOnlyTornTail: a read-only view reads up to a torn tail and
// leaves it for Open to repair.
func TestOpenReadOnlyTornTail(t *testing.T) {
	dir := t.TempDir()
	q := mustOpen(t, dir, Options{})
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		q.Put(ctx, faultBody(i))
	}
	q.Close()
	logName := filepath.Join(dir, segmentName(0, logSuffix))
	f, _ := os.OpenFile(logName, os.O_APPEND|os.O_WRONLY, 0)
	f.Write(appendRecord(nil, 0, 10, 0, []byte("torn"))[:15])
	f.Close()
	os.Remove(filepath.Join(dir, segmentName(0, indexSuffix)))
	size := fileSize2(t, logName)

	ro, err := OpenReadOnly(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ro.Stats().WriteSeq; got != 10 {
		t.Fatalf("read-only WriteSeq %d, want 10", got)
	}
	if rec, err := ro.ReadAt(7); err != nil || !bytes.Equal(rec.Body, faultBody(7)) {
		t.Fatalf("ReadAt without an index: %q, %v", rec.Body, err)
	}
	ro.Close()
	if got := fileSize2(t, logName); got != size {
		t.Fatalf("read-only open changed the log from %d to %d bytes", size, got)
	}
	rep, err := Verify(dir)
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() || rep.Records != 10 {
		t.Fatalf("Verify of a torn tail and a missing index: %+v", rep)
	}
}

func fileSize2(t *testing.T, name string) int64 {
	t.Helper()
	info, err := os.Stat(name)
	if err != nil {
		t.Fatal(err)
	}
	return info.Size()
}

func TestVerify(t *testing.T) {
	dir := t.TempDir()
	q := mustOpen(t, dir, Options{MaxSegmentBytes: 1 << 10})
	ctx := context.Background()
	for i := 0; i < 200; i++ {
		q.Put(ctx, faultBody(i))
	}
	q.Close()
	rep, err := Verify(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Records != 200 || rep.Segments < 3 {
		t.Fatalf("healthy queue: %+v", rep)
	}
	// Flip a byte in a sealed segment's record and an index entry.
	f, _ := os.OpenFile(filepath.Join(dir, segmentName(0, logSuffix)), os.O_RDWR, 0)
	f.WriteAt([]byte{0xFF}, 100)
	f.Close()
	g, _ := os.OpenFile(filepath.Join(dir, segmentName(0, indexSuffix)), os.O_RDWR, 0)
	g.WriteAt([]byte{0, 0, 0, 99}, fileHeaderSize+5*indexEntrySize)
	g.Close()
	rep, err = Verify(dir)
	if err != nil {
		t.Fatal(err)
	}
	var logProblem, indexProblem bool
	for _, p := range rep.Problems {
		logProblem = logProblem || (p.File == segmentName(0, logSuffix) && errors.Is(p.Err, ErrCorrupt))
		indexProblem = indexProblem || p.File == segmentName(0, indexSuffix)
	}
	if !logProblem || !indexProblem {
		t.Fatalf("Verify missed damage: %v", rep.Problems)
	}
	if rep.Records != 199 {
		t.Fatalf("Records %d, want 199 (every record but the damaged one)", rep.Records)
	}
}

// TestUnwritableDirectory: Open on a read-only file system fails with the
// operating system's error, and OpenReadOnly still reads what is there.
// Root ignores permission bits, so the test mounts a read-only tmpfs.
func TestUnwritableDirectory(t *testing.T) {
	mnt := mountTmpfs(t, "root ignores permission bits, so only a read-only mount makes a directory unwritable")
	dir := filepath.Join(mnt, "q")
	q := mustOpen(t, dir, Options{})
	q.Put(context.Background(), []byte("kept"))
	q.Close()
	if out, err := exec.Command("mount", "-o", "remount,ro", mnt).CombinedOutput(); err != nil {
		t.Fatalf("remount read-only: %v: %s", err, out)
	}
	_, err := Open(dir, Options{})
	if !errors.Is(err, syscall.EROFS) {
		t.Fatalf("Open on a read-only file system: got %v, want EROFS", err)
	}
	ro, err := OpenReadOnly(dir, Options{})
	if err != nil {
		t.Fatalf("OpenReadOnly on a read-only file system: %v", err)
	}
	defer ro.Close()
	if rec, err := ro.ReadAt(0); err != nil || string(rec.Body) != "kept" {
		t.Fatalf("ReadAt: %q, %v", rec.Body, err)
	}
}
