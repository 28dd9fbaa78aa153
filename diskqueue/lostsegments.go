package diskqueue

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// Segments a power cut left without records: at the end of the log, those
// whose contents never reached the disk though their names did.

// dropLostTail removes the segments at the end of the log that hold no
// record (no more than a header, or a header of zeros: neverSynced), when
// one with records comes before them, and when none holds
// any, all but the first, which appends go on in: either a power cut came
// after a directory fsync made their names durable (it covers every name,
// also of segments rotated out after the round began) and before anything
// fsynced their contents, or the last was rotated to and got no record.
// No Put of a lost record was promised durable, under any sync policy, so
// they are the log's torn tail, dropped as Open drops a torn record, not
// damage. The segment before them is then the last, and recovered as one
// (its own torn records cut), and appends go on from its end, so seqs of
// lost records are used again. A read-only view leaves them out without
// removing them. ghosts are the tombstones (findTombstones).
func (l *Log) dropLostTail(bases, ghosts []uint64) []uint64 {
	k := len(bases)
	zeroed := false // the first lost segment is its preallocated size in zeros
	for k > 0 {
		name := segmentName(bases[k-1], logSuffix)
		size, err := l.listedSize(name)
		if err != nil || size > fileHeaderSize && !l.neverSynced(name) {
			break
		}
		zeroed = size > fileHeaderSize
		k--
	}
	kept := false // the first lost segment stays, for appends to go on in
	if k < len(bases) && k > 0 && (l.isCompacted(bases[k-1]) || len(ghosts) > 0 && ghosts[len(ghosts)-1] > bases[k-1]) {
		// A compacted segment never takes appends: the first lost one
		// stays, as the segment they go on in, so that the compacted
		// segment keeps its end (its trailing seqs may be removed ones).
		// So it does after tombstones, so that their seqs, of records
		// acknowledged and deleted, are not given to new records.
		k++
		kept = true
	}
	if k == 0 && len(bases) > 0 {
		// Every segment lost its records: the first is the one they go
		// on in, as a segment left empty by its creation is (setAside).
		k = 1
		kept = true
	}
	if kept && zeroed && !l.readOnly {
		l.emptyLost(bases[k-1])
	}
	if k == len(bases) {
		return bases // none, or the one left is the first
	}
	lost := bases[k:]
	if l.readOnly {
		return bases[:k] // a view leaves them for the next Open to remove
	}
	l.logger.Warn("diskqueue: segments at the end of the log lost their records in a power cut before any was fsynced; removing them (none was promised durable)",
		"from_seq", lost[0], "segments", len(lost))
	for _, base := range lost {
		for _, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix, ackSuffix} {
			name := segmentName(base, suffix)
			if err := l.fs.Remove(filepath.Join(l.dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				l.logger.Warn("diskqueue: cannot remove a lost segment's file", "file", name, "err", err)
			}
			delete(l.listing, name)
		}
	}
	return bases[:k]
}

// neverSynced reports whether the segment log file name, longer than a
// header, starts with a header and a first record frame of zeros: its
// preallocated size reached the disk (a journal commits an allocation on
// its own) and none of its bytes did. Every fsync of a segment covers its
// header and its first record (SyncMapped syncs from offset 0; the write
// path fsyncs the whole file), which are written before any other record,
// so no record in it was ever fsynced: it is lost as one of header size
// is. A header of zeros before a first record that is there is damage to
// the header, which Open repairs from the records (checkLogHeader).
func (l *Log) neverSynced(name string) bool {
	head, err := readHead(l.fs, filepath.Join(l.dir, name), fileHeaderSize+recordHeaderSize)
	return err == nil && len(head) >= fileHeaderSize && allZero(head)
}

// emptyLost makes the kept first lost segment of base (dropLostTail), what
// a power cut left of it its preallocated size in zeros (neverSynced), as
// empty as a segment a power cut left of header size: its files cut to
// nothing, so Open takes it for one left empty by its creation and appends
// go on in it, not for a damaged one to set aside.
func (l *Log) emptyLost(base uint64) {
	for _, suffix := range []string{logSuffix, indexSuffix, timeIndexSuffix} {
		n := segmentName(base, suffix)
		path := filepath.Join(l.dir, n)
		f, err := l.fs.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			continue
		}
		err = f.Truncate(0)
		f.Close()
		if err != nil {
			l.logger.Warn("diskqueue: cannot empty a lost segment's file", "file", n, "err", err)
			continue
		}
		if info, err := l.fs.Stat(path); err == nil {
			l.listing[n] = fs.FileInfoToDirEntry(info)
		}
	}
}
