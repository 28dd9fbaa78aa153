package diskqueue

import (
	"cmp"
	"slices"
)

// CursorStats returns a snapshot of every cursor of the log, by name (a
// Queue's own cursor, if any, first, named ""). Like [Cursor.Stats] it
// takes no lock and does no I/O, and unlike [Log.Cursor] it never creates
// one.
func (l *Log) CursorStats() []CursorStats {
	list := *l.cursorList.Load()
	out := make([]CursorStats, len(list))
	for i, c := range list {
		out[i] = c.Stats()
	}
	slices.SortFunc(out, func(a, b CursorStats) int { return cmp.Compare(a.Name, b.Name) })
	return out
}
