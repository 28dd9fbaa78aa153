package diskqueue_test

import (
	"context"
	"errors"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/spillq/spillq/diskqueue"
)

// TestViewMethods: a View only looks. spillq hands one out for the logs
// its queues and topics own, so that a program watching them cannot
// Put to them, Read or Ack from their cursors, open or move a cursor,
// Compact, Empty or Close them under their owner. A method added here has
// to be one that leaves the log as it found it.
func TestViewMethods(t *testing.T) {
	want := []string{
		"CursorStats", "Depth", "Floor", "NextSeq", "Position", "ReadAt", "Scan",
		"SeekTime", "Segments", "Stats", "SyncLatencyBuckets", "SyncLatencySumSeconds",
	}
	typ := reflect.TypeFor[*diskqueue.View]()
	var got []string
	for i := range typ.NumMethod() {
		got = append(got, typ.Method(i).Name)
	}
	if !slices.Equal(got, want) {
		t.Errorf("View's methods are %v, want %v", got, want)
	}
}

// TestViewOfQueue: a Queue's view answers as the Queue does, its Stats and
// Depth its own cursor's, and moves nothing.
func TestViewOfQueue(t *testing.T) {
	q, err := diskqueue.Open(t.TempDir(), diskqueue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	before := time.Now()
	for _, b := range []string{"a", "b", "c"} {
		if err := q.Put(ctx, []byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	rec, err := q.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Ack(rec.Seq); err != nil {
		t.Fatal(err)
	}
	v := q.View()
	if st, want := v.Stats(), q.Stats(); st.ReadSeq != want.ReadSeq || st.WriteSeq != 3 || st.Depth != 2 {
		t.Errorf("view Stats %+v, queue's %+v", st, want)
	}
	if d := v.Depth(); d != 2 {
		t.Errorf("view Depth %d, want 2", d)
	}
	if got, err := v.ReadAt(1); err != nil || string(got.Body) != "b" {
		t.Errorf("view ReadAt(1) = %q, %v", got.Body, err)
	}
	var bodies []string
	for rec, err := range v.Scan(0, math.MaxUint64) {
		if err != nil {
			t.Fatal(err)
		}
		bodies = append(bodies, string(rec.Body))
	}
	if !slices.Equal(bodies, []string{"a", "b", "c"}) {
		t.Errorf("view Scan = %v", bodies)
	}
	if seq, err := v.SeekTime(before.Add(-time.Second)); err != nil || seq != 0 {
		t.Errorf("view SeekTime = %d, %v", seq, err)
	}
	if n, f := v.NextSeq(), v.Floor(); n != 3 || f != 1 {
		t.Errorf("view NextSeq %d Floor %d, want 3 and 1", n, f)
	}
	if segs := v.Segments(); len(segs) != 1 {
		t.Errorf("view Segments = %+v", segs)
	}
	if _, err := v.Position(2); err != nil {
		t.Errorf("view Position(2): %v", err)
	}
	// Looking moved nothing: the cursor reads on from where it was.
	if rec, err := q.Read(ctx); err != nil || rec.Seq != 1 {
		t.Errorf("Read after the view's lookups = %d, %v; want seq 1", rec.Seq, err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := v.ReadAt(0); !errors.Is(err, diskqueue.ErrClosed) {
		t.Errorf("view ReadAt after Close: %v, want ErrClosed", err)
	}
	if !v.Stats().Closed {
		t.Error("view Stats after Close: not Closed")
	}
}

// TestViewOfLog: a Log's view reports the cursor furthest behind, as
// Log.Stats does, and every cursor in CursorStats.
func TestViewOfLog(t *testing.T) {
	l, err := diskqueue.OpenLog(t.TempDir(), diskqueue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	fast, err := l.Cursor("fast", diskqueue.FromOldest())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Cursor("slow", diskqueue.FromOldest()); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		if err := l.Put(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		rec, err := fast.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := fast.Ack(rec.Seq); err != nil {
			t.Fatal(err)
		}
	}
	v := l.View()
	if d := v.Depth(); d != 4 {
		t.Errorf("view Depth %d, want 4 (slow's)", d)
	}
	if st, want := v.Stats(), l.Stats(); st.Depth != want.Depth || st.ReadSeq != want.ReadSeq || st.WriteSeq != want.WriteSeq {
		t.Errorf("view Stats %+v, log's %+v", st, want)
	}
	cs := v.CursorStats()
	if len(cs) != 2 || cs[0].Name != "fast" || cs[0].Depth != 1 || cs[1].Name != "slow" || cs[1].Depth != 4 {
		t.Errorf("view CursorStats = %+v", cs)
	}
}
