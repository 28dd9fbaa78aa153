package diskqueue

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestSeekTime covers equal timestamps, a clock stepping backwards, and
// seeks before the first and after the last record.
func TestSeekTime(t *testing.T) {
	var mu sync.Mutex
	var stamps []int64
	i := 0
	clock := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		ts := stamps[i]
		i++
		return time.Unix(0, ts)
	}
	// 0..99: ten per second from t=1000s; then the clock steps back 5 s
	// for 50 records; then it goes forward again.
	for k := 0; k < 100; k++ {
		stamps = append(stamps, int64(1000+k/10)*1e9)
	}
	for k := 0; k < 50; k++ {
		stamps = append(stamps, int64(1005)*1e9-int64(k))
	}
	for k := 0; k < 100; k++ {
		stamps = append(stamps, int64(1010+k/10)*1e9)
	}
	q := mustOpen(t, t.TempDir(), Options{MaxSegmentBytes: 2 << 10, clockForTesting: clock})
	defer q.Close()
	ctx := context.Background()
	for k := range stamps {
		if err := q.Put(ctx, faultBody(k)); err != nil {
			t.Fatal(err)
		}
	}
	q.Sync(ctx)
	if q.Stats().Segments < 3 {
		t.Fatal("test wants several segments")
	}
	// The answer is the first seq whose timestamp is >= target and all of
	// whose predecessors are older (Kafka's rule with a running maximum).
	want := func(target int64) (uint64, bool) {
		for k := range stamps {
			if stamps[k] >= target {
				return uint64(k), true
			}
		}
		return 0, false
	}
	targets := []int64{0, 999e9, 1000e9, 1000e9 + 1, 1003e9, 1004.5e9, 1005e9, 1009e9, 1010e9, 1019e9, 1020e9, 2000e9}
	for _, target := range targets {
		got, err := q.SeekTime(time.Unix(0, target))
		w, ok := want(target)
		if !ok {
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("SeekTime(%d): got %d, %v; want ErrNotFound", target, got, err)
			}
			continue
		}
		if err != nil || got != w {
			t.Fatalf("SeekTime(%d): got %d, %v; want %d", target, got, err, w)
		}
	}
	// Equal timestamps: the first of the ten records stamped 1003 s.
	if got, _ := q.SeekTime(time.Unix(1003, 0)); got != 30 {
		t.Fatalf("equal timestamps: got %d, want 30", got)
	}
}

func TestDecodeTimeIndex(t *testing.T) {
	b := appendFileHeader(nil, magicTimeIndex, 100)
	b = appendTimeEntry(b, 5, 100)
	b = appendTimeEntry(b, 5, 104)
	b = appendTimeEntry(b, 9, 110)
	got, err := decodeTimeIndex(b, 100)
	if err != nil || len(got) != 3 || got[2] != (timeEntry{9, 110}) {
		t.Fatalf("got %v, %v", got, err)
	}
	bad := appendTimeEntry(append([]byte(nil), b...), 8, 111) // running max went down
	if _, err := decodeTimeIndex(bad, 100); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("decreasing max: got %v, want ErrCorrupt", err)
	}
	if _, err := decodeTimeIndex(b, 101); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("wrong base: got %v, want ErrCorrupt", err)
	}
}
