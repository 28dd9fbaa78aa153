package diskqueue

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"
)

// allocUnit is the granularity of preallocation: every preallocated size
// is a multiple of it, and a sealed log is cut to its exact length. So a
// log whose size is a multiple of allocUnit may be one a crash left
// unsealed, and Open checks its tail (FORMAT.md).
const allocUnit = 4096

// Chunk sizes in which the active segment's files are preallocated. Each
// is a multiple of allocUnit. The log's is also how far ahead the preparer
// pre-faults (it is woken a chunk before the end): at 1 MiB a
// preparer the scheduler kept off a busy CPU for a millisecond or two
// left producers faulting on 2 to 4 times as many pages (34k against 11k
// to 18k over 4M Puts of 100 B, with other load on both cores).
const (
	logChunk   = 4 << 20
	indexChunk = 256 << 10
	timeChunk  = 64 << 10
)

// region is one file of a segment being appended to.
type region struct {
	f     file
	m     []byte // the file mapped shared and writable; nil on the write path
	alloc int64  // bytes preallocated (the file's size); mapped path only
	chunk int64
	// prefaulted is how much of m the preparer goroutine (or, for a
	// spare, the writer) has asked the kernel to populate; it and alloc
	// are guarded by l.mu.
	prefaulted int64
	// dropped is how much of m, from its start, has been taken out of the
	// mapping (dropWritten); guarded by l.dropMu.
	dropped int64
}

func roundUp(n, unit int64) int64 { return (n + unit - 1) / unit * unit }

// mapRegion maps f for appends up to limit bytes, with size bytes already
// written. It returns false, having changed nothing, if f cannot be mapped
// or preallocated here.
func mapRegion(f file, size, limit, chunk int64) (region, bool, error) {
	mf, ok := f.(mapper)
	if !ok {
		return region{f: f}, false, nil
	}
	limit = roundUp(max(limit, size), allocUnit)
	m, err := mf.Map(int(limit))
	if err != nil {
		if notSupported(err) {
			return region{f: f}, false, nil
		}
		return region{}, false, err
	}
	// Only what lies past the records written needs pre-faulting: a
	// recovered tail's old pages would only swell the resident set.
	r := region{f: f, m: m, alloc: size, chunk: chunk, prefaulted: size &^ (allocUnit - 1)}
	if size%allocUnit != 0 {
		// Preallocate to the next unit now, so the probe below tells at
		// Open whether this file system can.
		if err := r.ensure(roundUp(size, allocUnit)); err != nil && !isNoSpace(err) {
			unmap(m)
			if notSupported(err) {
				return region{f: f}, false, nil
			}
			return region{}, false, err
		}
	}
	return r, true, nil
}

// ensure makes [0, end) writable. On the mapped path it preallocates whole
// chunks, or, when the disk has no room for a chunk, just the pages end
// needs; on a failure nothing changes and the file keeps its size.
func (r *region) ensure(end int64) error {
	if r.m == nil || end <= r.alloc {
		return nil // inlined: every Put asks this of each of its files
	}
	return r.grow(end)
}

func (r *region) grow(end int64) error {
	if end > int64(len(r.m)) {
		return fmt.Errorf("diskqueue: %d bytes do not fit the %d-byte mapping", end, len(r.m))
	}
	mf := r.f.(mapper)
	// Grow by doubling up to a chunk, so a small queue stays small and a
	// busy one calls fallocate once per chunk.
	need := min(roundUp(end, allocUnit), int64(len(r.m)))
	step := min(r.chunk, max(allocUnit, r.alloc))
	want := min(max(need, roundUp(r.alloc+step, allocUnit)), int64(len(r.m)))
	err := mf.Allocate(r.alloc, want-r.alloc)
	if err != nil && isNoSpace(err) && need < want {
		// No room for the step; there may be for what this record needs.
		want = need
		err = mf.Allocate(r.alloc, want-r.alloc)
	}
	if err != nil {
		// Some file systems extend the file by what they managed before
		// failing; cut it back so its size stays a multiple of allocUnit.
		r.f.Truncate(r.alloc)
		return err
	}
	r.alloc = want
	return nil
}

// write copies b to off: into the mapping, or with write(2).
func (r *region) write(off int64, b []byte) error {
	if r.m != nil {
		copy(r.m[off:], b)
		return nil
	}
	_, err := r.f.WriteAt(b, off)
	return err
}

// putEntry stores one big-endian uint32 at off. Into a mapping it is one
// store, in order after the record's copy (storesInOrder, or else an
// atomic store), so a reader in another process that sees the index entry
// also sees the record it points at. This process's readers go by the
// segment's extent, published after it.
func (r *region) putEntry(off int64, v uint32) error {
	if r.m != nil {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], v)
		p := (*uint32)(unsafe.Pointer(&r.m[off])) // off is a multiple of 4
		if storesInOrder {
			*p = binary.NativeEndian.Uint32(b[:])
		} else {
			atomic.StoreUint32(p, binary.NativeEndian.Uint32(b[:]))
		}
		return nil
	}
	_, err := r.f.WriteAt(binary.BigEndian.AppendUint32(nil, v), off)
	return err
}

// sync makes the first n bytes of the file durable. On the mapped path
// only that range is written back (SyncMapped): the pages prefault dirtied
// past it stay writable, so the records copied there next take no fault.
func (r *region) sync(n int64) error {
	if r.m != nil {
		return r.f.(mapper).SyncMapped(r.m, n)
	}
	return r.f.Sync()
}

// dropWritten takes the pages wholly below end out of the mapping; they
// stay in the page cache, dirty or clean, and reads (pread) see them as
// before. Writeback then finds no mapping of them to write-protect:
// cleaning a mapped page costs a TLB shootdown, an interrupt of the CPU
// the producer runs on, per page, where this costs one for the range.
// Producers never touch a page below the records' end again (records are
// only appended), so none faults them back in. The caller holds l.dropMu.
func (r *region) dropWritten(end int64) {
	if r.m == nil {
		return
	}
	if to := end &^ int64(pageSize-1); to > r.dropped {
		dropPages(r.m[r.dropped:to])
		r.dropped = to
	}
}

// release unmaps the region; the file stays open.
func (r *region) release() {
	if r.m != nil {
		unmap(r.m)
		r.m = nil
	}
}

// appendFiles are the three files of a segment being appended to, its
// log, sequence index and time index: mapped all three (mapped) or none,
// so that an append either copies into mappings or writes with write(2),
// never a mix. Embedded in tail (a segment written or waiting to be
// sealed) and in segmentFiles (one made before it joins the log).
type appendFiles struct {
	log, index, timeIdx region
	mapped              bool
}

// regions are the three files' regions: log, index, time index.
func (a *appendFiles) regions() [3]*region {
	return [3]*region{&a.log, &a.index, &a.timeIdx}
}

// chunks are the preallocation steps of the three files, in the order of
// regions.
var chunks = [3]int64{logChunk, indexChunk, timeChunk}

// mapAll maps the three files for appends, each with sizes[i] bytes
// written and room for limits[i]. Where one cannot be mapped or
// preallocated here, it leaves all three unmapped and returns nil: the
// write path. On an error too nothing stays mapped.
func (a *appendFiles) mapAll(sizes, limits [3]int64) error {
	var rs [3]region
	for i, r := range a.regions() {
		m, ok, err := mapRegion(r.f, sizes[i], limits[i], chunks[i])
		if err != nil || !ok {
			for _, done := range rs[:i] {
				done.release()
			}
			return err
		}
		rs[i] = m
	}
	a.log, a.index, a.timeIdx = rs[0], rs[1], rs[2]
	a.mapped = true
	return nil
}

// unmap releases the three mappings; the files stay open.
func (a *appendFiles) unmap() {
	for _, r := range a.regions() {
		r.release()
	}
}

// close unmaps the files and closes those that were opened.
func (a *appendFiles) close() {
	for _, r := range a.regions() {
		r.release()
		if r.f != nil {
			r.f.Close()
		}
	}
}

// truncate cuts the three files to the given sizes, in the order of
// regions, stopping at the first failure.
func (a *appendFiles) truncate(log, index, timeIdx int64) error {
	for i, size := range [3]int64{log, index, timeIdx} {
		if err := a.regions()[i].f.Truncate(size); err != nil {
			return err
		}
	}
	return nil
}
