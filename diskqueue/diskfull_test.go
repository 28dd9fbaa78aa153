package diskqueue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
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
				testDiskFullPrefix(t, size, opts)
			})
		}
	}
}

func testDiskFullPrefix(t *testing.T, size int, opts Options) {
	mnt := mountTmpfs(t, "TestRecycleActivePrefix covers the same path on a file system that refuses allocations")
	if err := os.WriteFile(filepath.Join(mnt, "ballast"), make([]byte, 128<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(mnt, "q")
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
	read := 0 // bodies read and acknowledged
	readUpTo := func(stage string, to int) {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		for ; read < to; read++ {
			rec, err := q.Read(rctx)
			if err != nil {
				t.Fatalf("%s: Read %d: %v", stage, read, err)
			}
			if !bytes.Equal(rec.Body, body(read)) {
				t.Fatalf("%s: Read %d: got %.8q, want %.8q", stage, read, rec.Body, body(read))
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
				t.Fatalf("%s: Put %d with %d unacknowledged: %v", stage, i, n-read, err)
			}
			n++
			readUpTo(stage, max(read, n-behind))
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
}
