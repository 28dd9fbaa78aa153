package channel

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

// TestKeyTableSnapshot: a snapshot names exactly the keys whose message
// reached the backend, with its ID and seq (and, under KeyDedup, when it
// was put), and stays as it was while the table goes on changing: it owns
// a copy of the keys, not the table's arena.
func TestKeyTableSnapshot(t *testing.T) {
	for _, p := range []KeyPolicy{KeyUnique, KeyReplace, KeyDedup} {
		t.Run(p.String(), func(t *testing.T) {
			kt, err := newKeyTable(p, time.Hour, nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			now := time.Now().UnixNano()
			put := func(key string, id ID, seq uint64, src msgSource) {
				t.Helper()
				a, err := kt.admit([]byte(key), id, now+int64(id))
				if err != nil {
					t.Fatal(err)
				}
				kt.commit(a, id, seq, src)
			}
			put("a", 1, 10, srcBackend)
			put("b", 2, 0, srcMemory) // went to memory: no record to name
			put("c", 3, 11, srcBackend)
			snap := kt.snapshot(0, time.Now().UnixNano())
			// The table changes after the copy: a key removed, another
			// added, and the key arena compacted twice, the second time
			// over the bytes the snapshot was taken from.
			kt.removeEntry(kt.ix.find([]byte("a"), kt.ix.hash([]byte("a"))))
			put("zz", 4, 12, srcBackend)
			kt.ix.compactArena()
			kt.ix.compactArena()
			got := snap.entries()
			want := []KeyEntry{{Key: "a", ID: 1, Seq: 10}, {Key: "c", ID: 3, Seq: 11}}
			if p == KeyDedup {
				want[0].At, want[1].At = time.Unix(0, now+1), time.Unix(0, now+3)
			}
			if len(got) != len(want) {
				t.Fatalf("snapshot %+v, want %+v", got, want)
			}
			for i := range want {
				if got[i].Key != want[i].Key || got[i].ID != want[i].ID || got[i].Seq != want[i].Seq || !got[i].At.Equal(want[i].At) {
					t.Fatalf("entry %d: %+v, want %+v", i, got[i], want[i])
				}
			}
		})
	}
}

// TestKeyDedupExpiresAtOnce: the first Put after a pause longer than the
// window, which finds most of the table expired and drops it in one pass,
// forgets exactly the keys put before the window.
func TestKeyDedupExpiresAtOnce(t *testing.T) {
	const window = int64(time.Second)
	kt, err := newKeyTable(KeyDedup, time.Duration(window), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixNano()
	id := ID(0)
	put := func(key string, at int64) error {
		id++
		a, err := kt.admit([]byte(key), id, at)
		if err == nil {
			kt.commit(a, id, uint64(id), srcBackend)
		}
		return err
	}
	for i := range 500 {
		if err := put(fmt.Sprint("old-", i), now); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		if err := put(fmt.Sprint("new-", i), now+window/2); err != nil {
			t.Fatal(err)
		}
	}
	later := now + window + 1
	if err := put("after", later); err != nil {
		t.Fatal(err)
	}
	if pending, _ := kt.stats(later); pending != 21 {
		t.Fatalf("%d keys pending after the pause, want 21", pending)
	}
	for i := range 20 {
		if err := put(fmt.Sprint("new-", i), later); !errors.Is(err, ErrDuplicate) {
			t.Fatalf("new-%d, put within the window: %v, want ErrDuplicate", i, err)
		}
	}
	for i := range 500 {
		if err := put(fmt.Sprint("old-", i), later); err != nil {
			t.Fatalf("old-%d, put before the window: %v", i, err)
		}
	}
}

// TestKeyDedupWindow: a key counts exactly as long as the window says,
// Stats counts only keys within it (also of keys put a while ago, with no
// Put since), and the table stays the size of the keys within the window,
// not of all keys ever put.
func TestKeyDedupWindow(t *testing.T) {
	const window, step = 1000, 10 // 100 keys within the window
	kt, err := newKeyTable(KeyDedup, time.Duration(window), nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	id := ID(0)
	put := func(key int, at int64) error {
		id++
		a, err := kt.admit([]byte(fmt.Sprint("k-", key)), id, at)
		if err == nil {
			kt.commit(a, id, uint64(id), srcBackend)
		}
		return err
	}
	const n = 100_000
	for i := range n {
		at := int64(i) * step
		if err := put(i, at); err != nil {
			t.Fatalf("key %d: %v", i, err)
		}
		if i%97 == 0 && i >= window/step {
			// Put window-step ago: still counts. Put window ago: gone.
			if err := put(i-(window/step-1), at); !errors.Is(err, ErrDuplicate) {
				t.Fatalf("key %d again %d ns after it: %v, want ErrDuplicate", i-(window/step-1), window-step, err)
			}
			if err := put(i-window/step, at); err != nil {
				t.Fatalf("key %d again %d ns after it: %v", i-window/step, window, err)
			}
		}
	}
	if slots := len(kt.ix.slots); slots > 1024 {
		t.Errorf("%d slots after %d keys, 100 of them within the window", slots, n)
	}
	now := int64(n-1) * step
	if pending, _ := kt.stats(now); pending < 100 || pending > 101 {
		t.Errorf("Stats counts %d keys pending, want the 100 within the window (and one put again)", pending)
	}
	if pending, _ := kt.stats(now + window/2); pending < 50 || pending > 51 {
		t.Errorf("Stats counts %d keys pending half a window later, with no Put since, want the 50 within the window", pending)
	}
}
