package diskqueue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// TestRealDiskFullAcknowledgedPrefix: on a 1 MiB tmpfs with 128 KiB of
// ballast and the default 100 MiB segments, the whole log is one active
// segment. Once the disk is full, consumers that keep up (acknowledging
// all but the newest few records) must leave room for as much as they
// acknowledged: the acknowledged prefix of the active segment is freed in
// place, though the segment itself cannot go. Before that fix, 10 Puts
// after a drain that left 10 records unacknowledged fit and the rest
// failed with ErrDiskFull (a black-box field run). It runs in the same
// process and after a reopen, with bodies of 4 KiB and 60 KiB, and with
// SyncEvery 1 and the defaults. Like the other tmpfs tests it needs
// mount(2), so it runs as root (as CI does) and is skipped, saying so,
// elsewhere.
func TestRealDiskFullAcknowledgedPrefix(t *testing.T) {
	for _, size := range []int{4 << 10, 60 << 10} {
		for _, opts := range []Options{{SyncEvery: 1}, {}} {
			t.Run(fmt.Sprintf("body%dK/sync%d", size>>10, opts.SyncEvery), func(t *testing.T) {
				testDiskFullPrefix(t, size, opts, new(atomic.Int64), func(string) {})
			})
		}
	}
}

// TestRealDiskFullPunchCrash copies the queue's files as a crash leaves
// them (every byte the kernel holds) right after the writer freed an
// acknowledged prefix of the active segment, and opens the copy: it
// delivers exactly the records not acknowledged, ReadAt of a freed one
// says ErrNotFound, FirstSeq is the first record kept, and Verify finds
// nothing wrong.
func TestRealDiskFullPunchCrash(t *testing.T) {
	snap := t.TempDir()
	var snapped atomic.Bool
	var unacked atomic.Int64 // the first unacknowledged body at the snapshot
	var read atomic.Int64
	opts := Options{SyncEvery: 1}
	var dir string
	opts.crashPointForTesting = func(p string) {
		if p != "punched-prefix" || snapped.Swap(true) {
			return
		}
		unacked.Store(read.Load())
		entries, err := os.ReadDir(dir)
		if err != nil {
			panic(err)
		}
		for _, e := range entries {
			if e.Name() == lockName || e.IsDir() {
				continue
			}
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				panic(err)
			}
			if err := os.WriteFile(filepath.Join(snap, e.Name()), b, 0o644); err != nil {
				panic(err)
			}
		}
	}
	n := testDiskFullPrefix(t, 4<<10, opts, &read, func(d string) { dir = d })
	if !snapped.Load() {
		t.Fatal("the writer never freed an acknowledged prefix")
	}
	q := mustOpen(t, snap, Options{})
	defer q.Close()
	from := int(unacked.Load())
	st := q.Stats()
	if st.FirstSeq != uint64(from) {
		t.Fatalf("FirstSeq after the crash %d, want %d (the first record not acknowledged)", st.FirstSeq, from)
	}
	if _, err := q.ReadAt(uint64(from - 1)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("ReadAt of a freed record: %v, want ErrNotFound", err)
	}
	for _, err := range q.Scan(0, 1) {
		if !errors.Is(err, ErrNotFound) {
			t.Fatalf("Scan from a freed record: %v, want ErrNotFound", err)
		}
	}
	got := readAll(t, q)
	if len(got) == 0 || !bytes.HasPrefix(got[0], []byte(fmt.Sprintf("%08d", from))) {
		t.Fatalf("after the crash read %d records starting %.8q, want them from %d", len(got), got, from)
	}
	for i, b := range got {
		if !bytes.HasPrefix(b, []byte(fmt.Sprintf("%08d", from+i))) {
			t.Fatalf("after the crash record %d is %.8q, want %08d", i, b, from+i)
		}
	}
	if from+len(got) > n {
		t.Fatalf("read %d records from %d, more than the %d put", len(got), from, n)
	}
	if rep, err := Verify(snap); err != nil || !rep.OK() {
		t.Fatalf("Verify after the crash: %v %+v", err, rep.Problems)
	}
}

// testDiskFullPrefix runs the disk-full drill and returns how many bodies
// it put. It calls onDir with the queue's directory before opening it and
// keeps in read how many bodies it has read and acknowledged.
func testDiskFullPrefix(t *testing.T, size int, opts Options, read *atomic.Int64, onDir func(string)) int {
	mnt := mountTmpfs(t, "TestRecycleActivePrefix covers the same path on a file system that refuses allocations")
	if err := os.WriteFile(filepath.Join(mnt, "ballast"), make([]byte, 128<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(mnt, "q")
	onDir(dir)
	q := mustOpen(t, dir, opts)
	t.Cleanup(func() { q.Close() }) // before the unmount
	ctx := context.Background()
	n := 0 // bodies put so far: body(i) is the i-th
	body := func(i int) []byte {
		b := bytes.Repeat([]byte{byte('a' + i%26)}, size)
		copy(b, fmt.Sprintf("%08d", i))
		return b
	}
	var err error
	for ; n < 10000; n++ {
		if err = q.Put(ctx, body(n)); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrDiskFull) {
		t.Fatalf("Put %d on a full tmpfs: %v, want ErrDiskFull", n, err)
	}
	if err := os.Remove(filepath.Join(mnt, "ballast")); err != nil {
		t.Fatal(err)
	}
	for ; ; n++ {
		if err = q.Put(ctx, body(n)); err != nil {
			break
		}
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = mustOpen(t, dir, opts)
	readUpTo := func(stage string, to int) {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		for r := int(read.Load()); r < to; r = int(read.Add(1)) {
			rec, err := q.Read(rctx)
			if err != nil {
				t.Fatalf("%s: Read %d: %v", stage, r, err)
			}
			if !bytes.Equal(rec.Body, body(r)) {
				t.Fatalf("%s: Read %d: got %.8q, want %.8q", stage, r, rec.Body, body(r))
			}
			if err := q.Ack(rec.Seq); err != nil {
				t.Fatal(err)
			}
		}
	}
	readUpTo("drain after reopen", n)
	// Consumers that keep up: each Put, once 10 are outstanding, comes
	// after the oldest is acknowledged. Put three disks' worth.
	const behind = 10
	keepUp := func(stage string) {
		t.Helper()
		for i := 0; i < 3*(1<<20)/size; i++ {
			if err := q.Put(ctx, body(n)); err != nil {
				t.Fatalf("%s: Put %d with %d unacknowledged: %v", stage, i, n-int(read.Load()), err)
			}
			n++
			readUpTo(stage, n-behind)
		}
	}
	keepUp("same process")
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = mustOpen(t, dir, opts)
	keepUp("after reopen")
	readUpTo("final drain", n)
	if rep, err := Verify(dir); err != nil || !rep.OK() {
		t.Fatalf("Verify: %v %+v", err, rep.Problems)
	}
	return n
}
