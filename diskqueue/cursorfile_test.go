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
