package spillq_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// TestCompactReplace: under KeyReplace, Compact removes from sealed
// segments the versions a newer stored one superseded, and nothing else;
// consumers see the same thing before and after, a removed seq is
// ErrCompacted, and a restart changes nothing.
func TestCompactReplace(t *testing.T) {
	dir := t.TempDir()
	opts := spillq.Options{Keys: channel.KeyReplace, Disk: diskqueue.Options{MaxSegmentBytes: 4 << 10}}
	q := open(t, dir, opts)
	ctx := context.Background()
	const keys, versions = 50, 3
	for v := range versions {
		for k := range keys {
			if err := q.PutWith(ctx, []byte(fmt.Sprintf("k%d:%d", k, v)), channel.PutOptions{Key: []byte(fmt.Sprintf("k%d", k))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := q.Put(ctx, []byte("no key")); err != nil {
		t.Fatal(err)
	}
	if err := spillq.SyncDisk(ctx, q); err != nil {
		t.Fatal(err)
	}
	st, err := q.Compact(ctx)
	if err != nil {
		t.Fatalf("Compact: %v", err)
	}
	// Versions 0 and 1 of every key are superseded; those in sealed
	// segments go (the active segment's stay until it is sealed).
	if st.Removed == 0 || st.Removed > keys*(versions-1) || st.LogBytesAfter >= st.LogBytesBefore {
		t.Fatalf("Compact: %+v; want some of the %d superseded versions removed", st, keys*(versions-1))
	}
	if _, err := q.Disk().ReadAt(0); !errors.Is(err, diskqueue.ErrCompacted) {
		t.Errorf("ReadAt of a removed version: %v, want ErrCompacted", err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = open(t, dir, opts)
	defer q.Close()
	got := map[string]int{}
	plain := 0
	done, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for len(got) < keys || plain == 0 {
		m, err := q.Receive(done)
		if err != nil {
			t.Fatalf("Receive after %d keys: %v", len(got), err)
		}
		if m.Key == nil {
			plain++
		} else {
			k, v := parseKV(t, m)
			if _, dup := got[k]; dup || v != versions-1 {
				t.Fatalf("delivered %s:%d; want only the newest version, once", k, v)
			}
			got[k] = v
		}
		m.Finish()
	}
	nothing, cancel2 := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel2()
	if m, err := q.Receive(nothing); err == nil {
		t.Fatalf("unexpected %q after the newest of each key", m.Body)
	}
}

// TestCompactReplacePending: the versions Compact removes before any
// consumer reached them count as superseded, once each (whether the
// channel had read them ahead or not), and leave no key pending once the
// newest versions are finished.
func TestCompactReplacePending(t *testing.T) {
	dir := t.TempDir()
	opts := spillq.Options{Keys: channel.KeyReplace, CompactDirtyRatio: -1, Disk: diskqueue.Options{MaxSegmentBytes: 2 << 10}}
	q := open(t, dir, opts)
	defer q.Close()
	ctx := context.Background()
	const keys, versions = 200, 3 // more than the channel reads ahead
	for v := range versions {
		for k := range keys {
			if err := q.PutWith(ctx, []byte(fmt.Sprintf("k%d:%d", k, v)), channel.PutOptions{Key: []byte(fmt.Sprintf("k%d", k))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitSealed(t, q.Disk(), 3)
	st, err := q.Compact(ctx)
	if err != nil || st.Removed == 0 {
		t.Fatalf("Compact: %+v, %v; want superseded versions removed", st, err)
	}
	// Those the channel had not read yet count now; those it had read
	// ahead count as it takes them.
	if cs := q.Stats(); cs.Superseded > st.Removed || cs.KeysPending != keys {
		t.Fatalf("after Compact removed %d: %d superseded, %d keys pending; want at most %d and %d", st.Removed, cs.Superseded, cs.KeysPending, st.Removed, keys)
	}
	for range keys {
		m, err := q.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, v := parseKV(t, m); v != versions-1 {
			t.Fatalf("delivered %q; want only newest versions", m.Body)
		}
		if err := m.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	if cs := q.Stats(); cs.Superseded != keys*(versions-1) || cs.KeysPending != 0 {
		t.Fatalf("drained: %d superseded, %d keys pending; want %d and 0", cs.Superseded, cs.KeysPending, keys*(versions-1))
	}
	// The versions removed unread leave the backlog too: they stayed in
	// DiskDepth (and Depth) for good, and with a memory buffer every Put
	// then went past it to the disk.
	if cs := q.Stats(); q.Depth() != 0 || cs.DiskDepth != 0 || cs.BackendDepth != 0 {
		t.Fatalf("drained: Depth %d, DiskDepth %d, BackendDepth %d; want 0", q.Depth(), cs.DiskDepth, cs.BackendDepth)
	}
	if cs := q.CompactStats(); cs.Runs != 1 || cs.Removed != st.Removed || cs.LogBytesAfter >= cs.LogBytesBefore {
		t.Fatalf("CompactStats %+v after one compaction of %+v", cs, st)
	}
}

// TestCompactedUnreadAcrossRestart: versions a compaction removed before
// the channel read them are in the disk queue's depth after a restart
// (their bits are set only as the reader passes them), which the channel
// took for its backlog: Depth and DiskDepth stayed at the number removed
// after every message was finished (a review found it). The channel now
// counts off what the reads pass over (the Cursor's Passed).
func TestCompactedUnreadAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	opts := spillq.Options{Keys: channel.KeyReplace, CompactDirtyRatio: -1, Disk: diskqueue.Options{MaxSegmentBytes: 2 << 10}}
	q := open(t, dir, opts)
	ctx := context.Background()
	const keys, versions = 200, 3
	for v := range versions {
		for k := range keys {
			if err := q.PutWith(ctx, []byte(fmt.Sprintf("k%d:%d", k, v)), channel.PutOptions{Key: []byte(fmt.Sprintf("k%d", k))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitSealed(t, q.Disk(), 3)
	if st, err := q.Compact(ctx); err != nil || st.Removed == 0 {
		t.Fatalf("Compact: %+v, %v", st, err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = open(t, dir, opts)
	defer q.Close()
	for range keys {
		m := recv(t, q)
		if _, v := parseKV(t, m); v != versions-1 {
			t.Fatalf("delivered %q; want only newest versions", m.Body)
		}
		m.Finish()
	}
	if cs := q.Stats(); q.Depth() != 0 || cs.DiskDepth != 0 || cs.BackendDepth != 0 {
		t.Fatalf("drained after a restart: Depth %d, DiskDepth %d, BackendDepth %d; want 0", q.Depth(), cs.DiskDepth, cs.BackendDepth)
	}
}

// waitSealed waits until log has at least n sealed segments (the writer
// goroutine seals a rotated segment soon after).
func waitSealed(t *testing.T, log interface {
	Segments() []diskqueue.SegmentInfo
}, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		sealed := 0
		for _, s := range log.Segments() {
			if s.Sealed {
				sealed++
			}
		}
		if sealed >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sealed segments after 10s, want %d", sealed, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCompactRetained: with retention and no key policy, Compact removes
// the acknowledged records of a key a newer record replaced, and keeps the
// newest of each key, records without a key, and every record not yet
// acknowledged, however old.
func TestCompactRetained(t *testing.T) {
	dir := t.TempDir()
	opts := spillq.Options{CompactDirtyRatio: -1, Disk: diskqueue.Options{MaxSegmentBytes: 1 << 10, RetainBytes: 1 << 20}}
	q := open(t, dir, opts)
	defer q.Close()
	ctx := context.Background()
	const keys, versions = 20, 3
	put := func(body, key string) {
		t.Helper()
		var po channel.PutOptions
		if key != "" {
			po.Key = []byte(key)
		}
		if err := q.PutWith(ctx, []byte(body), po); err != nil {
			t.Fatal(err)
		}
	}
	put("held:0", "held")
	for v := range versions {
		for k := range keys {
			put(fmt.Sprintf("k%d:%d", k, v), fmt.Sprintf("k%d", k))
		}
		put(fmt.Sprintf("plain:%d", v), "")
	}
	put("held:1", "held")
	var held *channel.Message
	for range 1 + versions*(keys+1) + 1 {
		m, err := q.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if string(m.Body) == "held:0" {
			held = m // in flight: not acknowledged, though replaced
			continue
		}
		if err := m.Finish(); err != nil {
			t.Fatal(err)
		}
	}
	waitSealed(t, q.Disk(), 3)
	st, err := q.Compact(ctx)
	if err != nil || st.Removed == 0 {
		t.Fatalf("Compact: %+v, %v", st, err)
	}
	left := map[string]bool{}
	for rec, err := range q.Disk().Scan(0, math.MaxUint64) {
		if err != nil {
			t.Fatal(err)
		}
		m, err := channel.UnmarshalMessage(rec.Body)
		if err != nil {
			t.Fatal(err)
		}
		left[string(m.Body)] = true
	}
	for k := range keys {
		for v := range versions {
			body := fmt.Sprintf("k%d:%d", k, v)
			// Superseded versions in the active segment stay until it is sealed.
			if v == versions-1 && !left[body] {
				t.Errorf("newest version %s removed", body)
			}
		}
	}
	for _, body := range []string{"held:0", "held:1", "plain:0", "plain:1", "plain:2"} {
		if !left[body] {
			t.Errorf("%s removed; want kept (not acknowledged, newest, or without a key)", body)
		}
	}
	if int64(len(left)) != 1+versions*(keys+1)+1-st.Removed {
		t.Errorf("%d records left after removing %d", len(left), st.Removed)
	}
	if err := held.Finish(); err != nil {
		t.Fatal(err)
	}
}

// TestCompactAutomatic: under KeyReplace the queue compacts by itself once
// its sealed log is dirty enough, and removes the superseded versions.
func TestCompactAutomatic(t *testing.T) {
	spillq.SetKeySaveInterval(t, 20*time.Millisecond) // the keeper's look for a compaction to start
	dir := t.TempDir()
	opts := spillq.Options{Keys: channel.KeyReplace, Disk: diskqueue.Options{MaxSegmentBytes: 2 << 10}}
	q := open(t, dir, opts)
	defer q.Close()
	ctx := context.Background()
	for i := range 500 {
		k := fmt.Sprintf("k%d", i%10)
		if err := q.PutWith(ctx, []byte(fmt.Sprintf("%s:%d", k, i)), channel.PutOptions{Key: []byte(k)}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for q.CompactStats().Removed == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no compaction removed anything in 30s: %+v", q.CompactStats())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if cs := q.CompactStats(); cs.Err != nil || cs.LogBytesAfter >= cs.LogBytesBefore {
		t.Fatalf("automatic compaction: %+v", cs)
	}
	seen := map[string]bool{}
	for range 10 {
		m, err := q.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		k, v := parseKV(t, m)
		if seen[k] || v < 490 {
			t.Fatalf("delivered %s:%d; want the newest version of each key, once", k, v)
		}
		seen[k] = true
		m.Finish()
	}
}

// TestCompactHeldVersion: a compaction that removes a superseded version
// the channel has in flight leaves it the channel's: requeued, it is
// dropped as superseded, never delivered again after the newer one was
// finished, and counted once.
func TestCompactHeldVersion(t *testing.T) {
	for _, compact := range []bool{false, true} {
		t.Run(fmt.Sprintf("compact=%v", compact), func(t *testing.T) {
			opts := spillq.Options{Keys: channel.KeyReplace, CompactDirtyRatio: -1, Disk: diskqueue.Options{MaxSegmentBytes: 2 << 10}}
			q := open(t, t.TempDir(), opts)
			defer q.Close()
			ctx := context.Background()
			key := channel.PutOptions{Key: []byte("k")}
			if err := q.PutWith(ctx, []byte("k:1"), key); err != nil {
				t.Fatal(err)
			}
			m1, err := q.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := q.PutWith(ctx, []byte("k:2"), key); err != nil {
				t.Fatal(err)
			}
			m2, err := q.Receive(ctx)
			if err != nil || string(m2.Body) != "k:2" {
				t.Fatalf("Receive: %v, %v", m2, err)
			}
			m2.Finish()
			for i := range 200 {
				if err := q.Put(ctx, []byte(fmt.Sprintf("filler %d", i))); err != nil {
					t.Fatal(err)
				}
			}
			waitSealed(t, q.Disk(), 2)
			if compact {
				if st, err := q.Compact(ctx); err != nil || st.Removed == 0 {
					t.Fatalf("Compact: %+v, %v", st, err)
				}
			}
			if err := m1.Requeue(0); err != nil {
				t.Fatal(err)
			}
			drain(t, q, func() int64 { return q.Stats().BackendDepth }, func(m *channel.Message) {
				if string(m.Body) == "k:1" {
					t.Fatalf("k:1 delivered again after k:2 was finished")
				}
				m.Finish()
			})
			if st := q.Stats(); st.Superseded != 1 || st.KeysPending != 0 {
				t.Fatalf("drained: %d superseded, %d keys pending; want 1 and 0", st.Superseded, st.KeysPending)
			}
		})
	}
}

// TestCompactAfterRestartCounts: after a restart (the key state restored,
// its versions unknown) the versions a compaction removes unread count as
// superseded, as those the channel drops do.
func TestCompactAfterRestartCounts(t *testing.T) {
	for _, compact := range []bool{false, true} {
		t.Run(fmt.Sprintf("compact=%v", compact), func(t *testing.T) {
			dir := t.TempDir()
			opts := spillq.Options{Keys: channel.KeyReplace, CompactDirtyRatio: -1, Disk: diskqueue.Options{MaxSegmentBytes: 2 << 10}}
			q := open(t, dir, opts)
			ctx := context.Background()
			const keys = 150
			for v := range 2 {
				for k := range keys {
					if err := q.PutWith(ctx, []byte(fmt.Sprintf("k%d:%d", k, v)), channel.PutOptions{Key: []byte(fmt.Sprintf("k%d", k))}); err != nil {
						t.Fatal(err)
					}
				}
			}
			waitSealed(t, q.Disk(), 2)
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
			q = open(t, dir, opts)
			defer q.Close()
			if compact {
				if _, err := q.Compact(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for range keys {
				m, err := q.Receive(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if _, v := parseKV(t, m); v != 1 {
					t.Fatalf("delivered %q, superseded", m.Body)
				}
				m.Finish()
			}
			if st := q.Stats(); st.Superseded != keys {
				t.Fatalf("Superseded %d, want %d", st.Superseded, keys)
			}
		})
	}
}

// TestCompactRightAfterPuts: Compact listed the segments before its Sync,
// whose round seals those rotated out before it, so right after a burst of
// Puts it passed over the segments not sealed yet and removed next to
// nothing, with no error (a docs-only user trial). Every segment but the
// active one holds superseded versions here, and Compact rewrites them all.
func TestCompactRightAfterPuts(t *testing.T) {
	ctx := context.Background()
	q := open(t, t.TempDir(), spillq.Options{Keys: channel.KeyReplace, CompactDirtyRatio: -1, Disk: diskqueue.Options{MaxSegmentBytes: 2048}})
	defer q.Close()
	for i := range 300 {
		if err := q.PutWith(ctx, []byte(fmt.Sprintf("v%03d", i)), channel.PutOptions{Key: []byte(fmt.Sprintf("k%d", i%5))}); err != nil {
			t.Fatal(err)
		}
	}
	cs, err := q.Compact(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if segs := q.Disk().Segments(); cs.Segments != int64(len(segs)-1) {
		t.Errorf("Compact rewrote %d segments (removed %d records); the log has %d, all but the active one holding superseded versions", cs.Segments, cs.Removed, len(segs))
	}
}

// TestCompactAfterClose: Compact after Close says so, for a queue or topic
// whose compaction removes records and for one whose removes nothing
// (there Compact is otherwise a no-op, which hid the Close).
func TestCompactAfterClose(t *testing.T) {
	ctx := context.Background()
	for _, keys := range []channel.KeyPolicy{channel.KeyReplace, channel.KeyNone} {
		t.Run(keys.String(), func(t *testing.T) {
			q := open(t, t.TempDir(), spillq.Options{Keys: keys})
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := q.Compact(ctx); !errors.Is(err, channel.ErrClosed) {
				t.Errorf("Queue.Compact after Close: %v, want ErrClosed", err)
			}
			tp, err := spillq.OpenTopic(t.TempDir(), spillq.TopicOptions{Keys: keys})
			if err != nil {
				t.Fatal(err)
			}
			if err := tp.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := tp.Compact(ctx); !errors.Is(err, channel.ErrClosed) {
				t.Errorf("Topic.Compact after Close: %v, want ErrClosed", err)
			}
		})
	}
}
