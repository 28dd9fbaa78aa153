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
			put := func(key string, id ID, seq uint64, stored bool) {
				t.Helper()
				a, err := kt.admit([]byte(key), id, now+int64(id))
				if err != nil {
					t.Fatal(err)
				}
				kt.commit(a, id, seq, stored)
			}
			put("a", 1, 10, true)
			put("b", 2, 0, false) // went to memory: no record to name
			put("c", 3, 11, true)
			snap := kt.snapshot(0)
			// The table changes after the copy: a key removed, another
			// added, and the key arena compacted twice, the second time
			// over the bytes the snapshot was taken from.
			kt.removeEntry(kt.ix.find([]byte("a"), kt.ix.hash([]byte("a"))))
			put("zz", 4, 12, true)
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
			kt.commit(a, id, uint64(id), true)
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
	if pending, _ := kt.stats(); pending != 21 {
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
