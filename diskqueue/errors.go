package diskqueue

import (
	"errors"

	"github.com/spillq/spillq/internal/closed"
	"github.com/spillq/spillq/internal/notdurable"
	"github.com/spillq/spillq/internal/vfs"
)

// Errors returned when opening a queue.
var (
	// ErrLocked is returned by [Open] when another Queue, in this process or
	// another, has the directory open.
	ErrLocked = vfs.ErrLocked

	// ErrUnsupportedVersion is returned by [Open] and the read methods when a
	// file was written in a format version this build does not read.
	ErrUnsupportedVersion = errors.New("diskqueue: unsupported format version")

	// ErrInvalidOptions is returned by [Open] when an [Options] field is out of
	// range; the wrapped message names the field.
	ErrInvalidOptions = errors.New("diskqueue: invalid options")
)

// Errors returned when putting records.
var (
	// ErrRecordTooLarge is returned by [Log.Put] and [Log.PutBatch] when a
	// body is longer than Options.MaxRecordBytes.
	ErrRecordTooLarge = errors.New("diskqueue: record too large")

	// ErrRecordTooSmall is returned by [Log.Put] and [Log.PutBatch] when a
	// body is shorter than Options.MinRecordBytes.
	ErrRecordTooSmall = errors.New("diskqueue: record too small")

	// ErrDiskFull is returned by [Log.Put] and [Log.PutBatch] when the queue holds
	// Options.MaxDiskBytes, or when the file system reported ENOSPC; in the
	// second case the error also wraps syscall.ENOSPC. Put works again once
	// consumers have freed space.
	ErrDiskFull = errors.New("diskqueue: disk full")

	// ErrNotDurable is returned, wrapped with the context's error, by a
	// Put or PutBatch under SyncEvery 1 whose ctx ended while it waited
	// for the fsync of records it had already stored. They are in the log:
	// they survive a crash of the process, consumers will read them, and
	// the writer fsyncs them in its next round, but a power cut before
	// that may lose them. Retrying such a Put stores the record twice.
	// Any other error from Put means it stored nothing (PutBatch: nothing
	// past the count it returns); a ctx already ended when Put is called
	// stores nothing. It is the same value as channel.ErrNotDurable.
	ErrNotDurable = notdurable.Err
)

// Errors returned by any method.
var (
	// ErrClosed is returned by every method called after [Log.Close], and by
	// calls that were blocked when Close ran. It is the same value as
	// channel.ErrClosed, nsqbridge.ErrClosed and spillq.ErrClosed, so
	// errors.Is matches it by any of those names.
	ErrClosed = closed.Err

	// ErrCorrupt reports bytes on disk that fail their checksum or framing.
	// Read methods never return a body that failed its check; [Queue.Read]
	// skips such records (and counts them in [Stats]), while [Log.ReadAt]
	// returns ErrCorrupt for them.
	ErrCorrupt = errors.New("diskqueue: corrupt data")

	// ErrNotFound is returned by [Log.ReadAt] and [Log.SeekTime] for a
	// sequence number that was never written or is no longer retained.
	ErrNotFound = errors.New("diskqueue: record not found")

	// ErrReadOnly is returned by [Log.Put], [Log.PutBatch], [Log.Sync],
	// [Log.Empty] and [Cursor.Empty] on a queue opened with [OpenReadOnly].
	ErrReadOnly = errors.New("diskqueue: opened read-only")

	// ErrNotInFlight is returned by [Queue.Ack] for a sequence number that was
	// not handed out by [Queue.Read], or was already acknowledged.
	ErrNotInFlight = errors.New("diskqueue: record is not in flight")

	// ErrCompacted is returned by [Log.ReadAt] for a sequence number whose
	// record [Log.Compact] removed from its segment. The seq stays taken:
	// no other record ever gets it.
	ErrCompacted = errors.New("diskqueue: record removed by compaction")
)

// Errors returned by [Log.Compact].
var (
	// ErrNotCompactable is returned by [Log.Compact] for a segment it may
	// not rewrite: the active segment, one rotated out but not yet sealed
	// (cut to size and fsynced: try again after [Log.Sync]), or one whose
	// compacted log would be 2 GiB or more; the message says which. A
	// segment deleted (or being deleted) gives [ErrNotFound] instead, and
	// one with damaged records [ErrCorrupt].
	ErrNotCompactable = errors.New("diskqueue: segment cannot be compacted")
)

// errShortFrame is internal: a frame runs past the bytes available. At the
// tail of the log it means a torn write; anywhere else it is corruption.
var errShortFrame = errors.New("diskqueue: short frame")
