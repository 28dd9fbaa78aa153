package diskqueue

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"
)

// TestLaterBitmapDurableBeforeEarlierReadEnd: a power cut on a real disk
// can leave a later segment's bitmap durable (the kernel wrote its dirty
// page back, or a round fsynced it as retired) while an earlier one still
// holds the header it was made with, readEnd 0, the raise of it by the
// reader lost. Open counted acknowledgements only up to the first bitmap
// whose readEnd said it was never read, so the later one's were not
// counted: its records came again, their Acks failed as already
// acknowledged, and Depth never came back to 0.
// Found by a review of the crash recovery.
// TestPowerCutAtEverySync met it once, as a final Depth of 7.
func TestLaterBitmapDurableBeforeEarlierReadEnd(t *testing.T) {
	for _, kind := range memFSKinds() {
		t.Run(kind.name, func(t *testing.T) {
			mfs, opts, q := fixedQueue(t, kind)
			putFixed(t, q, 9) // segments 0, 3 and 6
			done, cancel := context.WithCancel(context.Background())
			cancel()
			readAcking(t, q, 7, func(seq uint64) bool { return seq >= 3 }) // 0..2 stay in flight; 3..6 finished
			if err := q.Close(); err != nil {
				t.Fatal(err)
			}
			// The state the cut leaves: segment 0's bitmap as made, readEnd 0.
			f, err := mfs.OpenFile("/q/"+segmentName(0, ackSuffix), os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(make([]byte, 8), 16); err != nil {
				t.Fatal(err)
			}
			if err := f.Sync(); err != nil {
				t.Fatal(err)
			}
			f.Close()

			if q, err = Open("/q", opts); err != nil {
				t.Fatal(err)
			}
			defer q.Close()
			if d := q.Depth(); d != 5 {
				t.Errorf("Depth after Open = %d, want 5 (0..2 and 7..8)", d)
			}
			var got []uint64
			for {
				rec, err := q.Read(done)
				if err != nil {
					break
				}
				got = append(got, rec.Seq)
				if err := q.Ack(rec.Seq); err != nil {
					t.Errorf("Ack(%d): %v", rec.Seq, err)
				}
			}
			if want := []uint64{0, 1, 2, 7, 8}; !slices.Equal(got, want) {
				t.Errorf("delivered %v after Open, want %v: 3..6 were acknowledged", got, want)
			}
			if d := q.Depth(); d != 0 {
				t.Errorf("Depth after every record was acknowledged = %d, want 0", d)
			}
		})
	}
}

// TestAckAfterClose: Close released the files and the directory lock; an
// Ack after it must not open them again.
func TestAckAfterClose(t *testing.T) {
	q := mustOpen(t, t.TempDir(), Options{})
	ctx := context.Background()
	q.Put(ctx, []byte("x"))
	rec, err := q.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	q.Close()
	if err := q.Ack(rec.Seq); !errors.Is(err, ErrClosed) {
		t.Fatalf("Ack after Close: got %v, want ErrClosed", err)
	}
}

func newTestAckSet(floor uint64) *ackSet {
	s := &ackSet{segs: map[*segment]*segAcks{}}
	s.ackFloor.Store(floor)
	return s
}

func TestAckSetState(t *testing.T) {
	s := newTestAckSet(20)
	below, at, gone := testSeg(10, 10, false), testSeg(20, 10, false), testSeg(30, 10, false)
	gone.gone.Store(true)
	if sa := s.state(below); sa.acked != 10 {
		t.Errorf("a segment below the floor: %d acknowledged, want all 10", sa.acked)
	}
	if sa := s.state(at); sa.acked != 0 {
		t.Errorf("the floor's segment: %d acknowledged, want 0", sa.acked)
	}
	if sa := s.state(gone); sa.acked != 10 {
		t.Errorf("a deleted segment: %d acknowledged, want all 10", sa.acked)
	}
	if s.state(at) != s.segs[at] || len(s.segs) != 3 {
		t.Error("state made a second state for a segment")
	}
	if got := s.allAcked([]*segment{below, at, gone}); !slices.Equal(got, []bool{true, false, true}) {
		t.Errorf("allAcked = %v", got)
	}
	s.segs[at].acked = 10
	if got := s.allAcked([]*segment{at, testSeg(40, 5, false)}); !slices.Equal(got, []bool{true, false}) {
		t.Errorf("allAcked of a segment acknowledged out of order, and of one never touched = %v", got)
	}
}

func TestAckSetDrop(t *testing.T) {
	s := newTestAckSet(0)
	seg := testSeg(0, 10, false)
	sa := s.state(seg)
	f := &fakeFile{}
	sa.ack = &ackFile{region: region{f: f}}
	s.lastAcked, s.lastRead = sa, sa
	s.drop(seg)
	if sa.ack != nil || f.closes != 1 || len(s.segs) != 0 || s.lastAcked != nil || s.lastRead != nil {
		t.Fatalf("after drop: ack %v, %d closes, %d states, caches %v %v", sa.ack, f.closes, len(s.segs), s.lastAcked, s.lastRead)
	}
	s.drop(seg) // a segment it never had: nothing to do
}

func TestAckSetDepth(t *testing.T) {
	s := newTestAckSet(100)
	s.ackedAbove.Store(3)
	if d := s.depth(func() uint64 { return 110 }); d != 7 {
		t.Errorf("depth = %d, want 110-100-3", d)
	}
	s.passGone(100, 102) // two of the three were in a deleted segment
	if s.ackedAbove.Load() != 1 {
		t.Errorf("ackedAbove = %d after passing a deleted segment", s.ackedAbove.Load())
	}
}

func TestSegAcksHolds(t *testing.T) {
	seg := testSeg(10, 5, true)
	sa := &segAcks{seg: seg}
	if !sa.holds(14) || sa.holds(15) {
		t.Fatal("holds disagrees with the segment's end")
	}
	seg.setExtent(fileHeaderSize, 20) // a Put
	if !sa.holds(15) || sa.known != 20 {
		t.Fatalf("holds missed a record appended since (known %d)", sa.known)
	}
}

// TestNewCursorMidSegmentAcks: a cursor created while the active segment
// already holds more records than one allocUnit of bitmap covers
// (4064*8 = 32512) got a bitmap createAckFile preallocates to one
// allocUnit (grow), and nothing grew it until the next Put's reserve:
// acknowledging a record past 32512 faulted on the mapped path. The same
// create path serves a bitmap Open takes for absent (an empty header after
// a power cut). ackFor now grows it to the records there.
func TestNewCursorMidSegmentAcks(t *testing.T) {
	ctx := context.Background()
	l, err := OpenLog(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for range 33000 {
		if err := l.Put(ctx, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	c, err := l.Cursor("n", FromOldest())
	if err != nil {
		t.Fatal(err)
	}
	if n := ackReady(t, c); n != 33000 {
		t.Errorf("delivered %d, want 33000", n)
	}
}
