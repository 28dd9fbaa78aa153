// Package diskqueue is spillq's durable log: an append-only FIFO of records
// in rotating segment files, with checksums, group commit, a fixed-width
// sequence index, a sparse time index and at-least-once reading.
//
// # Using it
//
// [Open] a directory, [Log.Put] records, [Queue.Read] them in order (or
// [Queue.ReadBatch] several at once) and [Queue.Ack] each one when done.
// [Log.ReadAt] finds any retained record by sequence number with one
// index read and one log read; [Log.SeekTime] finds the first record at
// or after a time; [Log.Scan] replays a range without moving any cursor;
// [Log.Compact] rewrites a sealed segment without the records its owner
// no longer needs. Package
// [github.com/spillq/spillq/diskqueue/godq] gives the same engine behind
// github.com/nsqio/go-diskqueue's interface.
//
// A [Queue] is a [Log] with one [Cursor] of its own. Several consumers
// that each need every record (consumer groups, nsqd's channels) share one
// log through named cursors: [OpenLog], then [Log.Cursor] for each. Every
// record is written once, whatever the number of cursors; each cursor
// costs a read position and one bit per record, and a segment is deleted
// when every cursor has acknowledged all of it.
//
// [Log.View] and [Queue.View] hand out a read-only [View] of a log, its
// lookups and Stats and nothing that writes, reads a cursor or closes,
// for code that watches a log another part of the program owns (spillq's
// Queue.Disk and Topic.Log).
//
// # Guarantees
//
//   - Order: records are read in the order their Puts took the queue's
//     lock, and every record gets the next sequence number (seq).
//   - Durability: when Put returns nil the record is in the kernel's page
//     cache, so a crash of the process (panic, OOM kill, SIGKILL) loses
//     nothing a Put returned for, under every sync policy. What reaches
//     stable storage, and when, is the sync policy's business: with
//     SyncEvery 1, Put returns only once its record is fsynced, and Puts
//     waiting at the same moment share one fsync (group commit), as do the
//     records of one [Log.PutBatch]; by default
//     (fsync every 2500 records or 2 seconds, as nsqd) a power cut loses
//     at most what was put since the last fsync. [Log.Sync] makes
//     everything put so far durable. NoSync turns fsync off altogether.
//   - Delivery: at-least-once, and exact across a process crash. Ack
//     records the acknowledgement in the segment's bitmap file in the
//     kernel at once: after a crash exactly the records not acknowledged
//     are delivered again. A power cut may deliver again those
//     acknowledged since the last fsync of the bitmaps (the sync tick).
//   - Space: a segment every record of which is acknowledged is deleted
//     (or kept by retention), even while an older segment still holds an
//     unacknowledged record, so one long-held record pins one segment, not
//     the log. With MaxDiskBytes a full log refuses Puts (or makes them
//     wait) until cursors free space, unless the cursors holding the oldest
//     segments are set to drop when full ([Cursor.SetDropWhenFull]): those
//     give up their unacknowledged records of them, counted and logged,
//     so that one abandoned cursor cannot stop the log. [Cursor.Empty]
//     discards one cursor's backlog. When the file system is full (not the
//     budget), the acknowledged records at the front of the active segment
//     have their blocks freed in place (FORMAT.md, "Punched prefix"), so
//     consumers that keep up leave room for as much as they acknowledged;
//     reads of those seqs then find them gone (ErrNotFound).
//   - Integrity: every record carries a CRC-32C. A record that fails it is
//     never returned as data: Read skips it, copies its bytes to a .bad file,
//     logs a warning and counts it in [Stats]; the records around it stay
//     readable: the next one is found where the damaged frame's length
//     says, else through the sequence index, else by searching the bytes.
//   - Compaction: [Log.Compact] keeps a sealed segment's seqs and
//     one-index-read lookups; [Log.ReadAt] of a removed record returns
//     [ErrCompacted], Scan skips it, and a cursor's Read passes over the
//     removed records it had not read, counting them acknowledged (an Ack
//     of one already handed out still succeeds). The new files are
//     written beside the old and swapped in so that a crash or power cut
//     at any step leaves the old segment or the new one, whole; Open
//     finishes or undoes an interrupted compaction. Reads racing a
//     compaction see one version or the other.
//   - Errors: limits, a full disk, a locked directory and a closed queue are
//     sentinel errors for errors.Is. A full disk shows before a byte of a
//     record is written ([ErrDiskFull] wrapping ENOSPC) and Put works again
//     once space is freed. A failed write or fsync is sticky: Put, Sync and
//     Close return it from then on, because after a failed fsync the kernel
//     may have dropped the data it could not write. A fault on a mapped
//     file (cut short by another process) is an error, never a crash.
//
// # Recovery
//
// Sealed segments are cut to size and fsynced when appends move on, so Open
// reads only the tail of the last segment (and of any older one a crash
// left unsealed, which still has its preallocated size): from the last
// sequence-index entry that points at its record, forward. Zeros after the
// records are preallocated space; a torn final record (short, or failing
// its CRC with nothing valid after it) is cut off and saved to a .bad file;
// damage with valid records after it is kept for readers to skip. One
// scanner walks every log (scanner.go): past damage it resumes at the next
// record that checks out, found the same way readers find it (the damaged
// frame's length, the sequence index, a search of the bytes), so Open,
// a read-only view ([OpenReadOnly], [Verify]), an index rebuild and readers
// agree on where damage ends. A read-only view reads the last segment's
// tail as Open does, changing nothing: it finds the records after damage
// in the middle of it, and leaves a torn tail for the next Open to cut. Sealed
// segments are taken from the directory listing and their files opened and
// checked on first use, so Open costs about the same for ten million
// records as for ten thousand. Index files are derived data, rebuilt from
// the log when missing, short or wrong. Segments at the end with no record
// after one with records (a power cut came after their names were durable
// and before their contents were) are the log's torn tail: dropped, not
// reported as damage. Spare segment files made ahead of need are removed.
// Each cursor's acknowledgements are counted from its stored read position
// up to where the last run had read, no further. A damaged cursor file
// makes Open deliver again to that cursor every record on disk that its
// acknowledgement files do not mark acknowledged, rather than start empty. A directory lock (flock) stops a second Open, in this
// process or another.
//
// # Concurrency
//
// Logs, cursors and queues are safe for concurrent use. Producers append
// under the log's mu: each copies its record and index entries straight
// into the active segment's files, preallocated and mapped (a record of
// 1 KiB or more with one pwrite into the same file; on Linux;
// elsewhere, or where the file system cannot, with its own write(2));
// Stats.WritePath says which. One writer goroutine per log does what
// should not hold producers up: fsyncs by the sync policy, sealing rotated
// segments, storing the cursors, fsyncing acknowledgements, deleting
// segments, and the work that must not race those (Empty, Cursor.Empty,
// DeleteCursor, the drop-when-full policy: Log.request). A second one, the
// preparer, preallocates and pre-faults the mapped log ahead of the
// appends, so an fsync that takes long does not hold that up, and ticks
// the clock that stamps records while Puts come. A cursor's
// readers share its read position under its readMu and read the segment
// files through shared read-only mappings on 64-bit Linux (a load, no
// system call; decoded and checksummed in place, the body copied out),
// with pread elsewhere or where a file cannot be mapped. A fault on a mapping
// (the file cut short underneath, or failing to page in) is caught
// (debug.SetPanicOnFault) and the read done again with pread, which
// reports a cut as damage and a failure as an I/O error.
//
// A segment's read handles come in generations (segFiles): the files it
// was created or found with, then each compaction's, with their mappings.
// A reader holds the generation it reads (a reference count), so offsets
// from one index are used in the same log, and a generation a compaction
// replaced is closed and unmapped by its last reader; a deletion closes
// every generation's descriptors at once and makes each cursor's reader
// let go, and the last holder unmaps (never a holder's mapping from under
// it). A sealed segment nobody holds keeps its generation only while it
// is among the last few used (a clock over at most 64 such segments,
// segCache): the others give theirs back, descriptors and mappings, and
// are opened again on their next use, as segments found at Open are. So
// the handles a log holds are bounded by that and by its readers, not by
// its backlog. A cursor likewise keeps open the bitmaps of the segments
// being written, of where it reads and of those with records in flight,
// and closes the others once more than 32 are open (fsyncing first what
// it owes, on the writer goroutine); ackFor opens them again on use.
// Compactions run one at a time (the log's compaction slot) and do their
// long part, reading the old files and writing the new, on the caller's
// goroutine; the swap runs on the writer goroutine.
//
// Lock order, outermost first: the log's compaction slot (held by
// Compact throughout, never taken under another lock), the log's prepMu
// (the preparer goroutine's use of the active segment's mapping outside mu,
// and seal's unmapping, which waits for it), the log's mu (producer side: the active
// segment's tail with every cursor's bitmap of it, the segments waiting to
// be sealed, the sticky error, the set of cursors: cursorRegistry), a
// cursor's readMu (consumer side: its reader; its ackSet, the floor, the
// counts and each segment's state and bitmap; its bitmapCache, which of
// those bitmaps are open and the files closed owing an fsync; never two
// cursors' at once), the log's segMu (the segment list,
// and the disk usage of segments joining, leaving or changing it), the
// segment cache's mu (which sealed segments may hold read handles), a
// segment's filesMu (its lazily opened read handles, their eviction, and
// the swap of a compacted generation, renames included), a generation's
// mu (its descriptors' closing against their mapping). The log's dropMu
// (the active segment's mark of pages taken out of its mapping) is a
// leaf: nothing is taken under it. A segment's size and end are one
// atomic word (its extent) a producer publishes after the record and its
// index entry, so a reader sees both or neither; the writer goroutine
// alone seals, deletes and closes write handles, so it may use the active
// segment's handles outside mu. A cursor's file (storedPosition) is stored
// only by the writer goroutine. The cursor's ackSet floor and counts, and
// its handed and acks, are written under its readMu and read without it
// (Depth, Stats, housekeeping); the bitmapCache's newFiles flag is atomic.
//
// # Format
//
// The bytes on disk are specified in FORMAT.md at the repository root and
// pinned by the golden files in testdata/v1 (and testdata/v2, a compacted
// segment: its log and index are format version 2). Queues written before
// acknowledgement files existed open as they are: each segment gets its
// acknowledgement file on first use.
package diskqueue
