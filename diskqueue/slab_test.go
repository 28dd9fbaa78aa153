package diskqueue

import (
	"bytes"
	"testing"
)

// Bodies carved from one block are capped: appending to one reallocates
// rather than writing into the next body. A body over slabMaxBody gets an
// allocation of its own.
func TestSlabCopiesAreCapped(t *testing.T) {
	var s slab
	a := s.copy([]byte("first"))
	b := s.copy([]byte("second"))
	if cap(a) != len(a) {
		t.Fatalf("cap %d for a body of %d", cap(a), len(a))
	}
	_ = append(a, 'X')
	if !bytes.Equal(b, []byte("second")) {
		t.Fatalf("appending to one body changed the next: %q", b)
	}
	big := s.copy(make([]byte, slabMaxBody+1))
	if len(big) != slabMaxBody+1 || s.used != len("first")+len("second") {
		t.Fatalf("a big body went into the block (used %d)", s.used)
	}
	for range slabSize / 1000 {
		s.copy(make([]byte, 1000))
	}
	if c := s.copy([]byte("after")); !bytes.Equal(c, []byte("after")) {
		t.Fatalf("copy after the block ran out: %q", c)
	}
}
