package diskqueue

import (
	"context"
	"testing"
	"time"
)

// TestClockReadings checks what record timestamps promise (clock.go): a
// reading taken before the Put returned, never less than an earlier
// record's, fresh after a tick and after clockReuse records, and fresh
// again, with the ticker running again, after the ticker stopped on an
// idle log.
func TestClockReadings(t *testing.T) {
	l, err := OpenLog(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	// The log's own clock: the same monotonic sum its readings take.
	now := func() int64 { return l.startedNano + int64(time.Since(l.started)) }
	put := func() int64 {
		t.Helper()
		seq, err := l.PutSeq(ctx, []byte("x"))
		if err != nil {
			t.Fatal(err)
		}
		rec, err := l.ReadAt(seq)
		if err != nil {
			t.Fatal(err)
		}
		return rec.Time.UnixNano()
	}

	prev := int64(0)
	for i := range 3 * clockReuse {
		ts := put()
		if after := now(); ts > after {
			t.Fatalf("record %d: timestamp %d is after its Put returned (%d)", i, ts, after)
		}
		if ts < prev {
			t.Fatalf("record %d: timestamp %d is before the previous record's %d", i, ts, prev)
		}
		prev = ts
	}

	before := now()
	l.clock.ticks.Add(1) // what the ticker does
	if ts := put(); ts < before {
		t.Fatalf("after a tick: timestamp %d is older than the tick (%d)", ts, before)
	}

	before = now()
	var ts int64
	for range clockReuse {
		ts = put()
	}
	if ts < before {
		t.Fatalf("a reading stamped more than %d records: %d < %d", clockReuse, ts, before)
	}

	deadline := time.Now().Add(30 * time.Second)
	for !l.clock.parked.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the clock's ticker did not stop on an idle log")
		}
		time.Sleep(time.Millisecond)
	}
	before = now()
	if ts := put(); ts < before {
		t.Fatalf("after the ticker stopped: timestamp %d is older than %d", ts, before)
	}
	tick := l.clock.ticks.Load()
	for l.clock.ticks.Load() == tick {
		if time.Now().After(deadline) {
			t.Fatal("a Put did not start the clock's ticker again")
		}
		time.Sleep(time.Millisecond)
	}
}
