package diskqueue

import (
	"encoding/binary"
	"fmt"
	"io"
	"math/bits"
	"os"
	"runtime/debug"
)

// Acknowledgements. Each segment has an acknowledgement file beside it
// (NNNN.ack): a header and a bitmap with one bit per record, set by Ack the
// moment it is made. On Linux the file is preallocated and mapped, so an
// Ack is a store into the page cache and survives a crash of the process;
// elsewhere it is a one-byte write(2). After a crash exactly the records
// whose bits are clear are delivered again. A power cut loses the bits set
// since the last fsync of the file (the sync tick and Close fsync them), so
// it may deliver again records finished just before it.
//
// The read cursor file still holds the oldest unacknowledged record (the
// floor); it is a starting point, not the truth: Open moves the floor over
// the bits set above it.
//
//	header (32 bytes):
//	0       4     5       6          8                16              24          32
//	| magic | ver | flags | reserved | base uint64 BE | readEnd uint64 | reserved   |
//	bitmap: bit i (byte i/8, bit i%8, least significant first) = record base+i
//
// readEnd bounds the records that have ever been handed out by Read (it is
// raised ahead of the reader, 1024 records at a time), so Open counts the
// bits below it and no further. flags bit 0 (ackGone) marks a tombstone: every
// record of the segment was acknowledged and its other files deleted while
// an older segment still held unacknowledged records; the tombstone keeps
// that gap in the log from looking like lost data.
const (
	ackHeaderSize = 32
	ackVersion    = 1
	ackGone       = 1 << 0
	// readEndStep is how far ahead of the reader readEnd is raised, so the
	// header is written once per that many reads.
	readEndStep = 1024
)

var magicAck = [4]byte{'S', 'Q', 'A', 'K'}

// ackFile is one cursor's acknowledgement bitmap of one segment. It is
// guarded by the cursor's readMu, except alloc (below).
type ackFile struct {
	// region is the file, its mapping (header and bitmap, shared; nil on
	// the write path) and its preallocation, which appends grow as they do
	// the log's (reserve): alloc is guarded by the log's mu.
	region
	cap     uint64 // records the bitmap has room for
	readEnd uint64 // the stored readEnd
	name    string
	owner   *Cursor
	// mem says m is a private copy in memory: a read-only view's
	// acknowledgements are never stored.
	mem bool
	// dirty says bits were set since the writer last fsynced the file.
	dirty bool
	// made says this run created the file (for a segment that had none,
	// or whose file was damaged): its readEnd says nothing about what
	// earlier runs read.
	made bool
}

// memAckFile is a read-only view's acknowledgement state: a copy of the
// file's bits, or none, that Ack changes in memory only.
func memAckFile(name string, base, capacity uint64, from []byte) *ackFile {
	m := make([]byte, ackFileSize(capacity))
	copy(m, encodeAckHeader(base, 0, 0))
	if len(from) > ackHeaderSize {
		copy(m[ackHeaderSize:], from[ackHeaderSize:])
	}
	readEnd := uint64(0)
	if len(from) >= ackHeaderSize {
		readEnd = binary.BigEndian.Uint64(from[16:24])
	}
	return &ackFile{region: region{m: m}, cap: capacity, readEnd: readEnd, name: name, mem: true}
}

func ackFileSize(capacity uint64) int64 { return ackHeaderSize + int64((capacity+7)/8) }

func encodeAckHeader(base, readEnd uint64, flags byte) []byte {
	b := make([]byte, ackHeaderSize)
	copy(b, magicAck[:])
	b[4], b[5] = ackVersion, flags
	binary.BigEndian.PutUint64(b[8:], base)
	binary.BigEndian.PutUint64(b[16:], readEnd)
	return b
}

// decodeAckHeader checks an acknowledgement file's header.
func decodeAckHeader(b []byte, base uint64) (readEnd uint64, flags byte, err error) {
	if len(b) < ackHeaderSize {
		return 0, 0, fmt.Errorf("%w: acknowledgement header is %d bytes", ErrCorrupt, len(b))
	}
	if [4]byte(b[0:4]) != magicAck {
		return 0, 0, fmt.Errorf("%w: acknowledgement file has bad magic %q", ErrCorrupt, b[0:4])
	}
	if b[4] != ackVersion {
		return 0, 0, fmt.Errorf("%w: acknowledgement format version %d (this build reads %d)", ErrUnsupportedVersion, b[4], ackVersion)
	}
	if got := binary.BigEndian.Uint64(b[8:16]); got != base {
		return 0, 0, fmt.Errorf("%w: acknowledgement header has base %d, want %d", ErrCorrupt, got, base)
	}
	if b[5]&^ackGone != 0 {
		return 0, 0, fmt.Errorf("%w: unknown acknowledgement flags %#x", ErrCorrupt, b[5])
	}
	return binary.BigEndian.Uint64(b[16:24]), b[5], nil
}

// guardFault ends a fault guard on a bitmap's mapping begun by
// debug.SetPanicOnFault(true), whose old setting it restores, turning a
// fault (the file cut short or failing underneath) into an error. It is
// deferred itself, as defer guardFault(debug.SetPanicOnFault(true), &err,
// name): recover stops a panic only in the deferred function's own call.
func guardFault(old bool, err *error, what string) {
	debug.SetPanicOnFault(old)
	if r := recover(); r != nil {
		*err = fmt.Errorf("%w: %s: %v", errFault, what, r)
	}
}

// ackChunk is the most an acknowledgement file grows by at once (room for
// half a million records); it starts at one allocUnit and doubles.
const ackChunk = 64 << 10

// createAckFile makes a zeroed acknowledgement file for a segment, with room
// for capacity records. Where it can be mapped (and mapped says to try),
// it is preallocated: as records are appended when grow is set (reserve),
// whole otherwise, so a full disk shows at Put and an Ack does not fail for
// lack of space. On the write path it is a sparse file, whose one-byte
// writes can still meet a full disk.
func (c *Cursor) createAckFile(seg *segment, capacity uint64, mapped, grow bool) (*ackFile, error) {
	return c.createAckFileAt(c.ackPath(seg), seg.base, capacity, mapped, grow)
}

// createAckFileAt is createAckFile under any name, with base in its header
// (a spare segment's is rewritten when the spare is used).
func (c *Cursor) createAckFileAt(name string, base, capacity uint64, mapped, grow bool) (*ackFile, error) {
	f, err := c.log.fs.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_TRUNC, c.log.opts.FileMode)
	if err != nil {
		return nil, err
	}
	a := &ackFile{region: region{f: f, chunk: ackChunk}, cap: capacity, name: name, owner: c}
	size := ackFileSize(capacity)
	if mf, ok := f.(mapper); ok && mapped {
		alloc := size
		if grow {
			alloc = min(size, allocUnit)
		}
		err = mf.Allocate(0, alloc)
		if err == nil {
			a.alloc = alloc
			a.m, err = mf.Map(int(size))
		}
		if err != nil && notSupported(err) {
			a.m, a.alloc, err = nil, 0, nil
		}
	}
	if err == nil && a.m == nil {
		err = f.Truncate(size)
	}
	if err == nil {
		err = a.writeAt(encodeAckHeader(base, 0, 0), 0)
	}
	if err != nil {
		a.close()
		c.log.fs.Remove(name)
		return nil, fmt.Errorf("diskqueue: create %s: %w", name, err)
	}
	c.newFiles.Store(true)
	a.made = true
	return a, nil
}

// reserve preallocates the bitmap for the first records records, before
// the last of them is appended. The caller holds the log's mu; Acks write only bits
// of records that exist, inside what is preallocated.
func (a *ackFile) reserve(records uint64) error {
	if a.mem {
		return nil
	}
	return a.ensure(ackFileSize(records))
}

// openAckFile opens a segment's existing acknowledgement file, with room
// for at least capacity records. It returns os.ErrNotExist (wrapped) when
// there is none, or its header was never written to the disk, and
// ErrCorrupt for one whose header does not check out.
func (c *Cursor) openAckFile(seg *segment, capacity uint64) (*ackFile, byte, error) {
	name := c.ackPath(seg)
	if c.log.readOnly {
		b, err := readFile(c.log.fs, name)
		if err != nil {
			return nil, 0, err
		}
		_, flags, err := decodeAckHeader(b, seg.base)
		if err != nil {
			return nil, 0, fmt.Errorf("%s: %w", name, err)
		}
		capacity := max(uint64(max(len(b)-ackHeaderSize, 0))*8, capacity)
		return memAckFile(name, seg.base, capacity, b), flags, nil
	}
	f, err := c.log.fs.OpenFile(name, os.O_RDWR, 0)
	if err != nil {
		return nil, 0, err
	}
	head := make([]byte, ackHeaderSize)
	if n, err := f.ReadAt(head, 0); n < ackHeaderSize || allZero(head) {
		f.Close()
		switch {
		case (err == nil || err == io.EOF) && allZero(head[:n]):
			// Its header never reached the disk: a power cut came after a
			// directory fsync made its name durable and before anything
			// fsynced it (only a bitmap changed since it was made is), so
			// nothing in it was promised.
			return nil, 0, fmt.Errorf("%s was never written: %w", name, os.ErrNotExist)
		case err == io.EOF:
			return nil, 0, fmt.Errorf("%w: %s is %d bytes", ErrCorrupt, name, n)
		}
		return nil, 0, fmt.Errorf("diskqueue: read %s: %w", name, err)
	}
	readEnd, flags, err := decodeAckHeader(head, seg.base)
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("%s: %w", name, err)
	}
	size := fileSize(f)
	if size < 0 {
		f.Close()
		return nil, 0, fmt.Errorf("diskqueue: stat %s", name)
	}
	mapLen := max(size, ackFileSize(capacity))
	a := &ackFile{region: region{f: f, chunk: ackChunk}, readEnd: readEnd, name: name, owner: c, cap: uint64(size-ackHeaderSize) * 8}
	if mf, ok := f.(mapper); ok && flags&ackGone == 0 {
		m, err := mf.Map(int(mapLen))
		switch {
		case err == nil:
			a.m, a.alloc, a.cap = m, size, uint64(mapLen-ackHeaderSize)*8
			// A power cut may leave the file shorter than its records
			// need: a tick fsyncs it as preallocated then, and appends
			// grow it after. The mapping faults past the file's end.
			if err := a.ensure(ackFileSize(seg.endNow() - seg.base)); err != nil {
				a.close()
				return nil, 0, fmt.Errorf("diskqueue: grow %s: %w", name, err)
			}
		case !notSupported(err):
			f.Close()
			return nil, 0, fmt.Errorf("diskqueue: map %s: %w", name, err)
		}
	}
	if a.m == nil && size < mapLen {
		// The write path grows it sparse.
		if err := f.Truncate(mapLen); err != nil {
			f.Close()
			return nil, 0, fmt.Errorf("diskqueue: grow %s: %w", name, err)
		}
		a.cap = uint64(mapLen-ackHeaderSize) * 8
	}
	return a, flags, nil
}

// markDirty notes that the file changed since the writer last fsynced
// it. It stores only when the flag is clear: producers read the fields
// beside it (mem, alloc) on every Put, and a store on every Ack would take
// their cache line away from them each time.
func (a *ackFile) markDirty() {
	if !a.dirty {
		a.dirty = true
	}
}

func (a *ackFile) close() {
	if a.m != nil && !a.mem {
		unmap(a.m)
	}
	a.m = nil
	if a.f != nil {
		a.f.Close()
	}
}

func (a *ackFile) writeAt(b []byte, off int64) (err error) {
	if a.m != nil {
		defer guardFault(debug.SetPanicOnFault(true), &err, a.name)
		copy(a.m[off:], b)
		return nil
	}
	_, err = a.f.WriteAt(b, off)
	return err
}

// isSet reports whether record i (counted from the segment's base) is
// acknowledged.
func (a *ackFile) isSet(i uint64) (set bool, err error) {
	if i >= a.cap {
		return false, nil
	}
	off := ackHeaderSize + int64(i/8)
	if a.m != nil {
		defer guardFault(debug.SetPanicOnFault(true), &err, a.name)
		return a.m[off]&(1<<(i%8)) != 0, nil
	}
	var b [1]byte
	if _, err := a.f.ReadAt(b[:], off); err != nil {
		return false, fmt.Errorf("diskqueue: read %s: %w", a.name, err)
	}
	return b[0]&(1<<(i%8)) != 0, nil
}

// set acknowledges record i.
func (a *ackFile) set(i uint64) (err error) {
	if i >= a.cap {
		return fmt.Errorf("%w: %s has room for %d records, not record %d", ErrCorrupt, a.name, a.cap, i)
	}
	off := ackHeaderSize + int64(i/8)
	a.markDirty()
	if a.m != nil {
		defer guardFault(debug.SetPanicOnFault(true), &err, a.name)
		a.m[off] |= 1 << (i % 8)
		return nil
	}
	var b [1]byte
	if _, err := a.f.ReadAt(b[:], off); err != nil {
		return fmt.Errorf("diskqueue: read %s: %w", a.name, err)
	}
	b[0] |= 1 << (i % 8)
	if _, err := a.f.WriteAt(b[:], off); err != nil {
		return fmt.Errorf("diskqueue: write %s: %w", a.name, err)
	}
	return nil
}

// setRange acknowledges records [from, to) and returns how many of them
// were not acknowledged before.
func (a *ackFile) setRange(from, to uint64) (n int64, err error) {
	if from >= to {
		return 0, nil
	}
	if to > a.cap {
		return 0, fmt.Errorf("%w: %s has room for %d records, not record %d", ErrCorrupt, a.name, a.cap, to-1)
	}
	lo, hi := int64(from/8), int64((to+7)/8)
	set := func(b []byte) {
		for k := range b {
			i := uint64(lo+int64(k)) * 8 // the record of bit 0 of b[k]
			mask := byte(0xff)
			if i < from {
				mask &= 0xff << (from - i)
			}
			if i+8 > to {
				mask &= 0xff >> (i + 8 - to)
			}
			n += int64(bits.OnesCount8(mask &^ b[k]))
			b[k] |= mask
		}
	}
	a.markDirty()
	if a.m != nil {
		defer guardFault(debug.SetPanicOnFault(true), &err, a.name)
		set(a.m[ackHeaderSize+lo : ackHeaderSize+hi])
		return n, nil
	}
	b := make([]byte, hi-lo)
	if _, err := a.f.ReadAt(b, ackHeaderSize+lo); err != nil && err != io.EOF {
		return 0, fmt.Errorf("diskqueue: read %s: %w", a.name, err)
	}
	set(b)
	if _, err := a.f.WriteAt(b, ackHeaderSize+lo); err != nil {
		return 0, fmt.Errorf("diskqueue: write %s: %w", a.name, err)
	}
	return n, nil
}

// testAndSet acknowledges record i and reports whether it already was.
func (a *ackFile) testAndSet(i uint64) (was bool, err error) {
	if i >= a.cap {
		return false, fmt.Errorf("%w: %s has room for %d records, not record %d", ErrCorrupt, a.name, a.cap, i)
	}
	off := ackHeaderSize + int64(i/8)
	bit := byte(1) << (i % 8)
	if a.m != nil {
		defer guardFault(debug.SetPanicOnFault(true), &err, a.name)
		if a.m[off]&bit != 0 {
			return true, nil
		}
		a.m[off] |= bit
		a.markDirty()
		return false, nil
	}
	if was, err := a.isSet(i); err != nil || was {
		return was, err
	}
	return false, a.set(i)
}

// setAtFloor is testAndSet for the record at the floor, i, with one guard
// on the mapping for both of its reads: it also reports whether record
// i+1 is acknowledged, so the floor can step over i alone. n is how many
// records the segment holds. It does nothing and returns ok false unless
// the bitmap is mapped and record i+1 is in the segment.
func (a *ackFile) setAtFloor(i, n uint64) (was, nextSet, ok bool, err error) {
	if a.m == nil || i+1 >= min(n, a.cap) {
		return false, false, false, nil
	}
	defer guardFault(debug.SetPanicOnFault(true), &err, a.name)
	// The next bit first: a fault there leaves record i unacknowledged.
	j := i + 1
	nextSet = a.m[ackHeaderSize+int64(j/8)]&(1<<(j%8)) != 0
	off := ackHeaderSize + int64(i/8)
	bit := byte(1) << (i % 8)
	if a.m[off]&bit != 0 {
		return true, false, true, nil
	}
	a.m[off] |= bit
	a.markDirty()
	return false, nextSet, true, nil
}

// clearFrom clears the bits of record i and every one after it, up to the
// file's end, and reports whether any was set.
func (a *ackFile) clearFrom(i uint64) (cleared bool, err error) {
	end := a.cap
	if a.m != nil {
		// The mapping reaches past the file's end, where it faults and
		// the file holds nothing.
		end = min(end, uint64(max(a.alloc-ackHeaderSize, 0))*8)
	}
	if i >= end {
		return false, nil
	}
	lo, hi := int64(i/8), int64((end+7)/8)
	first, last := -1, -1 // the bytes changed, for the write(2) path
	clear := func(b []byte) {
		for k := range b {
			mask := byte(0xff)
			if k == 0 {
				mask <<= i % 8
			}
			if b[k]&mask != 0 {
				b[k] &^= mask
				cleared = true
				if first < 0 {
					first = k
				}
				last = k
			}
		}
	}
	if a.m != nil {
		defer guardFault(debug.SetPanicOnFault(true), &err, a.name)
		clear(a.m[ackHeaderSize+lo : ackHeaderSize+hi])
		return cleared, nil
	}
	b := make([]byte, hi-lo)
	if _, err := a.f.ReadAt(b, ackHeaderSize+lo); err != nil && err != io.EOF {
		return false, fmt.Errorf("diskqueue: read %s: %w", a.name, err)
	}
	if clear(b); cleared {
		// Only what changed: the rest may lie past the file's end (read
		// as zeros), and written it would fill the sparse file out to
		// the bitmap's capacity.
		if _, err := a.f.WriteAt(b[first:last+1], ackHeaderSize+lo+int64(first)); err != nil {
			return false, fmt.Errorf("diskqueue: write %s: %w", a.name, err)
		}
	}
	return cleared, nil
}

// raiseReadEnd records that records up to end (a seq) may have been handed
// out, in the bitmap of the segment at base, storing a little beyond it so
// the header is written rarely.
//
// The bits of the first records share the header's page, which reaches the
// disk whole. The others are on pages of their own, which the kernel may
// write back before the header's: a power cut could keep bits past a
// readEnd it lost, which Open does not count, and their records came
// again, their Acks refused as already acknowledged, Depth never back to 0.
// So the first raise past the header's page goes to the end of the bitmap
// at once and is made durable before it returns (before any of those
// records is handed out): one fsync per segment and cursor.
func (a *ackFile) raiseReadEnd(end, base uint64) error {
	if end <= a.readEnd {
		return nil
	}
	limit := base + a.cap
	next := min(end+readEndStep, limit)
	durable := false
	if first := base + firstPageRecords; next > first && a.readEnd <= first {
		next, durable = limit, !a.mem && !a.owner.log.opts.NoSync
	}
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], next)
	if err := a.writeAt(b[:], 16); err != nil {
		return err
	}
	if durable {
		if err := a.sync(ackHeaderSize); err != nil {
			return fmt.Errorf("diskqueue: fsync %s: %w", a.name, err)
		}
	}
	a.readEnd = next
	a.markDirty() // for syncAcks: Open trusts the bits only below it
	return nil
}

// firstPageRecords is how many records' bits share a bitmap's page with its
// header.
var firstPageRecords = uint64(pageSize-ackHeaderSize) * 8

// view calls f with the bitmap bytes holding records [from, to): the
// mapping itself (guarded against faults), or a copy read from the file on
// the write path. byte 0 of the slice holds record from/8*8.
func (a *ackFile) view(from, to uint64, f func(b []byte)) (err error) {
	to = min(to, a.cap)
	if from >= to {
		return nil
	}
	lo, hi := int64(from/8), int64((to+7)/8)
	if a.m != nil {
		defer guardFault(debug.SetPanicOnFault(true), &err, a.name)
		f(a.m[ackHeaderSize+lo : ackHeaderSize+hi])
		return nil
	}
	b := make([]byte, hi-lo)
	if _, err := a.f.ReadAt(b, ackHeaderSize+lo); err != nil {
		return fmt.Errorf("diskqueue: read %s: %w", a.name, err)
	}
	f(b)
	return nil
}

// countSet counts the set bits for records [from, to).
func (a *ackFile) countSet(from, to uint64) (int64, error) {
	to = min(to, a.cap)
	var n int64
	err := a.view(from, to, func(b []byte) {
		for i := from; i < to; {
			v := b[i/8-from/8]
			if i%8 == 0 && i+8 <= to {
				n += int64(bits.OnesCount8(v))
				i += 8
				continue
			}
			if v&(1<<(i%8)) != 0 {
				n++
			}
			i++
		}
	})
	return n, err
}

// firstClear returns the first record index in [from, to) whose bit is
// clear, or to.
func (a *ackFile) firstClear(from, to uint64) (uint64, error) {
	to = min(to, a.cap)
	found := to
	err := a.view(from, to, func(b []byte) {
		for k, v := range b {
			if v == 0xff {
				continue
			}
			i := (from/8 + uint64(k)) * 8
			for j := uint64(bits.TrailingZeros8(^v)); j < 8; j++ {
				if v&(1<<j) == 0 && i+j >= from {
					found = min(i+j, to)
					return
				}
			}
		}
	})
	return found, err
}

// recordCapacity is the most records a segment can hold under the current
// options: the size of a new segment's bitmap.
func (l *Log) recordCapacity() uint64 {
	// A segment rotates before a record would take it past
	// MaxSegmentBytes, so only a segment of one record is larger.
	return uint64((l.opts.MaxSegmentBytes-fileHeaderSize)/recordHeaderSize + 1)
}
