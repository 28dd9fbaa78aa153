package diskqueue

import (
	"errors"
	"testing"
)

func TestStoredPosition(t *testing.T) {
	var p storedPosition
	if p.positionMoved(5) {
		t.Error("a position with no cursor file to store it in moved")
	}
	p.file = &cursorFile{f: &fakeFile{}}
	if !p.positionMoved(5) || p.positionMoved(0) {
		t.Error("positionMoved disagrees with what is stored")
	}
	first, second := errors.New("first"), errors.New("second")
	p.saveFailed(first)
	p.saveFailed(second)
	if p.persistErr != first {
		t.Errorf("persistErr = %v, want the first failure, for Close", p.persistErr)
	}
	f := p.file.f.(*fakeFile)
	p.closeCursorFile()
	p.closeCursorFile()
	if f.closes != 1 || p.file.f != nil {
		t.Errorf("closeCursorFile closed the file %d times", f.closes)
	}
}

func TestCursorSlots(t *testing.T) {
	a := encodeCursorSlot(cursorState{gen: 1, readSeq: 10})
	b := encodeCursorSlot(cursorState{gen: 2, readSeq: 20})
	file := append(append([]byte(nil), a...), b...)
	if st, err := decodeCursorFile(file); err != nil || st.readSeq != 20 {
		t.Fatalf("newest slot: got %+v, %v", st, err)
	}
	// A torn write of the newer slot leaves the older one.
	torn := append([]byte(nil), file...)
	torn[cursorSlotSize+18] ^= 0xff
	if st, err := decodeCursorFile(torn); err != nil || st.readSeq != 10 {
		t.Fatalf("torn newer slot: got %+v, %v", st, err)
	}
	// Only the first slot written so far.
	if st, err := decodeCursorFile(a); err != nil || st.readSeq != 10 {
		t.Fatalf("one slot: got %+v, %v", st, err)
	}
	both := append([]byte(nil), file...)
	both[3] ^= 1
	both[cursorSlotSize+3] ^= 1
	if _, err := decodeCursorFile(both); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("both slots bad: got %v, want ErrCorrupt", err)
	}
}
