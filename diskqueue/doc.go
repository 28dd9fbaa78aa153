// Package diskqueue is spillq's durable log: an append-only FIFO of records
// in rotating segment files, with checksums, group commit, a fixed-width
// sequence index, a sparse time index and at-least-once reading.
//
// # Using it
//
// [Open] a directory, [Queue.Put] records, [Queue.Read] them in order and
// [Queue.Ack] each one when done. [Queue.ReadAt] finds any retained record
// by sequence number with one index read and one log read;
// [Queue.SeekTime] finds the first record at or after a time; [Queue.Scan]
// replays a range without moving the consumers' cursor. Package
// [github.com/spillq/spillq/diskqueue/godq] gives the same engine behind
// github.com/nsqio/go-diskqueue's interface.
//
// # Guarantees
//
//   - Order: records are read in the order their Puts took the queue's
//     lock, and every record gets the next sequence number (seq).
//   - Durability: with SyncEvery 1, Put returns only once its record is on
//     stable storage; Puts waiting at the same moment share one fsync. With
//     the default (fsync every 2500 records or 2 seconds, as nsqd), Put
//     returns once the record is queued for the writer: a process crash can
//     lose the records of the last moments that were not yet written, and a
//     power cut those not yet fsynced. [Queue.Sync] makes everything put so
//     far durable. NoSync turns fsync off altogether.
//   - Delivery: at-least-once. The read cursor is the oldest record not yet
//     acknowledged and is persisted lazily (at most every 100 ms while the
//     writer is busy, on the sync tick, at segment deletion and at Close), so
//     after a crash records acknowledged since the last persist are
//     delivered again.
//   - Integrity: every record carries a CRC-32C. A record that fails it is
//     never returned as data: Read skips it, copies its bytes to a .bad file,
//     logs a warning and counts it in [Stats]; the records around it stay
//     readable, found through the sequence index when the damage hides
//     where the next one starts.
//   - Errors: limits, a full disk, a locked directory and a closed queue are
//     sentinel errors for errors.Is. A failed write or fsync is sticky: Put,
//     Sync and Close return it from then on, because after a failed fsync
//     the kernel may have dropped the data it could not write. ENOSPC is the
//     exception: records already accepted are held and written once space
//     returns, while new Puts fail with [ErrDiskFull].
//
// # Recovery
//
// Sealed segments are fsynced at rotation, so Open reads only the tail of
// the last segment: from the last sequence-index entry that points at its
// record, forward. A torn final record (short, zeroed, or failing its CRC
// with nothing valid after it) is cut off and saved to a .bad file unless it
// is all zeros; damage with valid records after it is kept for readers to
// skip. Sealed segments are taken from the directory listing and their
// files opened and checked on first use, so Open costs about the same for
// ten million records as for ten thousand. Index files are derived data,
// rebuilt from the log when missing, short or wrong. A damaged cursor file makes Open deliver every record on
// disk again rather than start empty. A directory lock (flock) stops a
// second Open, in this process or another.
//
// # Concurrency
//
// A Queue is safe for concurrent use. Producers append encoded records to a
// shared buffer under a short mutex; one writer goroutine writes whole
// buffers with one write call, keeps the indexes, rotates, fsyncs and
// deletes consumed segments. Readers share one read cursor under another
// mutex and read the segment files with pread, in 256 KiB chunks.
//
// # Format
//
// The bytes on disk are specified in FORMAT.md at the repository root and
// pinned by the golden files in testdata/v1.
package diskqueue
