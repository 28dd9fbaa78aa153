//go:build linux

package diskqueue

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/spillq/spillq/internal/vfs"
)

// TestDropWrittenKeepsData: the pages dropWritten takes out of the mapping
// keep their bytes for pread, for the mapping (touched again) and for
// SyncMapped; the page holding end stays mapped.
func TestDropWrittenKeepsData(t *testing.T) {
	f, err := vfs.OS.OpenFile(filepath.Join(t.TempDir(), "f"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 3 * pageSize
	mf := f.(mapper)
	if err := mf.Allocate(0, int64(n)); err != nil {
		t.Skipf("no fallocate here: %v", err)
	}
	m, err := mf.Map(n)
	if err != nil {
		t.Fatal(err)
	}
	defer unmap(m)
	r := region{f: f, m: m, alloc: int64(n)}
	prefault(m)
	want := bytes.Repeat([]byte("spillq!"), n/7)
	end := int64(len(want))
	copy(m, want)
	r.dropWritten(end)
	if r.dropped != end&^int64(pageSize-1) {
		t.Fatalf("dropped %d bytes, want %d", r.dropped, end&^int64(pageSize-1))
	}
	got := make([]byte, len(want))
	if _, err := f.ReadAt(got, 0); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("pread after dropWritten: %v, bytes equal %v", err, bytes.Equal(got, want))
	}
	if !bytes.Equal(m[:end], want) {
		t.Fatal("the mapping lost bytes dropWritten took out of it")
	}
	if err := r.sync(end); err != nil {
		t.Fatal(err)
	}
	r.dropWritten(end - 1) // below what was dropped: nothing to do
	if r.dropped != end&^int64(pageSize-1) {
		t.Fatalf("dropped moved back to %d", r.dropped)
	}
}
