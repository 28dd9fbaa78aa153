package diskqueue

import "testing"

// The cache keeps at most its bound of sealed segments open, giving back
// first those not used since the clock last passed, and never one a
// reader holds or one still being written.
func TestSegCacheClock(t *testing.T) {
	c := &segCache{bound: 2}
	mk := func(base uint64) *segment {
		s := &segment{base: base}
		s.setExtent(100, base+1)
		s.sealed.Store(true)
		s.setFiles(nil, nil)
		return s
	}
	a, b, d, e := mk(0), mk(1), mk(2), mk(3)
	c.add(a)
	c.add(b)
	a.used.Store(true) // read lately
	c.add(d)           // over the bound: b goes, a keeps its handles
	if a.files.Load() == nil || b.files.Load() != nil || !b.evicted || d.files.Load() == nil {
		t.Fatalf("after the third: a open %v, b open %v", a.files.Load() != nil, b.files.Load() != nil)
	}
	held := a.files.Load()
	if !held.tryAcquire() {
		t.Fatal("tryAcquire")
	}
	d.writing.Store(true)
	c.add(e) // a is held and d written: neither goes; e, unused, does
	if a.files.Load() == nil || d.files.Load() == nil {
		t.Fatal("gave back a held or written segment")
	}
	if len(c.segs) > 3 {
		t.Fatalf("%d segments in the cache", len(c.segs))
	}
	held.release()
	d.writing.Store(false)
	c.add(mk(4))
	if len(c.segs) > 2 {
		t.Fatalf("%d segments in the cache once nothing is held, bound 2", len(c.segs))
	}
}
