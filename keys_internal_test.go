package spillq

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/internal/vfs"
)

// TestDedupStateOlderThanTheLog: a stored KeyDedup state whose watermark
// is older than the first record left on disk (MaxDiskBytes outranks the
// hold) opens, with the records that are left read as the tail.
func TestDedupStateOlderThanTheLog(t *testing.T) {
	dir := t.TempDir()
	opts := Options{Keys: channel.KeyDedup, Disk: diskqueue.Options{MaxSegmentBytes: 1 << 10}}
	q, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 200 {
		if err := q.PutWith(ctx, []byte(fmt.Sprintf("k%d:0", i)), channel.PutOptions{Key: []byte(fmt.Sprintf("k%d", i))}); err != nil {
			t.Fatal(err)
		}
		m, err := q.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m.Finish()
	}
	q.disk.HoldFrom(q.disk.NextSeq()) // as a stored state would, then segments go
	deadline := time.Now().Add(10 * time.Second)
	for q.disk.Stats().FirstSeq == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no segment deleted: %+v", q.disk.Stats())
		}
		q.disk.Sync(ctx)
		time.Sleep(10 * time.Millisecond)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	// What a crash leaves when the segments after the stored state went.
	if err := saveKeyState(dir, fileModes{vfs.OS, 0o600, 0o700}, keyFile{KeyState: channel.KeyState{Policy: channel.KeyDedup, Watermark: 0, Entries: []channel.KeyEntry{{Key: "old", ID: 1, Seq: 0, At: time.Now()}}}}); err != nil {
		t.Fatal(err)
	}
	q, err = Open(dir, opts)
	if err != nil {
		t.Fatalf("Open with a key state older than the log: %v", err)
	}
	defer q.Close()
	if err := q.PutWith(ctx, []byte("old:1"), channel.PutOptions{Key: []byte("old")}); err == nil {
		t.Fatal("Put of a key the stored state has: accepted, want ErrDuplicate")
	}
	if err := q.PutWith(ctx, []byte("k199:1"), channel.PutOptions{Key: []byte("k199")}); err == nil {
		t.Fatal("Put of a key still in the log: accepted, want ErrDuplicate")
	}
}

// TestKeyStateVersion1: a key state stored by an older build (version 1,
// no timer mark) is read, and under KeyDedup Open then reads the timer
// store's records of the last window: a key whose message waits there,
// and which that state does not name, stays a duplicate.
func TestKeyStateVersion1(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	opts := Options{Keys: channel.KeyDedup, DedupWindow: time.Hour}
	q, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.PutWith(ctx, []byte("d"), channel.PutOptions{Key: []byte("deferred"), Delay: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := q.PutWith(ctx, []byte("n"), channel.PutOptions{Key: []byte("now")}); err != nil {
		t.Fatal(err)
	}
	next := q.disk.NextSeq()
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	// As an older build stored it: the log's key, none of the timer
	// store's, and one only the state names (its record gone), which only
	// a state read back, not one rebuilt from the records, remembers.
	st := channel.KeyState{Policy: channel.KeyDedup, Watermark: next, Entries: []channel.KeyEntry{
		{Key: "now", ID: 2, Seq: 1, At: time.Now()},
		{Key: "stated", ID: 1, Seq: 0, At: time.Now()},
	}}
	if err := os.WriteFile(keyStateFile(dir), keyStateV1(st), 0o644); err != nil {
		t.Fatal(err)
	}
	q, err = Open(dir, opts)
	if err != nil {
		t.Fatalf("Open with a version 1 key state: %v", err)
	}
	defer q.Close()
	for _, k := range []string{"now", "deferred", "stated"} {
		if err := q.PutWith(ctx, []byte(k), channel.PutOptions{Key: []byte(k)}); !errors.Is(err, channel.ErrDuplicate) {
			t.Errorf("Put of key %q after Open with a version 1 state: %v, want ErrDuplicate", k, err)
		}
	}
}
