package diskqueue

import (
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"time"

	"github.com/spillq/spillq/internal/vfs"
)

// Options configures a [Queue]. The zero value is valid and means "all
// defaults"; [Open] works on a copy and never writes to the caller's struct.
type Options struct {
	// MaxSegmentBytes is the size at which the log rotates to a new segment
	// file. A single record larger than this gets a segment of its own.
	// Zero means 100 MiB (nsqd's default). Range: 41 bytes (a header and one
	// empty record) to 4 GiB-1, because index entries are uint32 offsets.
	MaxSegmentBytes int64

	// MaxRecordBytes is the largest body Put accepts. Zero means 1 MiB
	// (nsqd's max-msg-size). Range: up to [MaxRecordBytesLimit], 2 GiB-22,
	// so every frame length fits in the int32 prefix. It limits Put only:
	// reads take every record already written, under whatever limit it was
	// written.
	MaxRecordBytes int

	// MinRecordBytes is the smallest body Put accepts. Zero allows empty
	// bodies.
	MinRecordBytes int

	// SyncEvery is how many records may be written between fsyncs. 1 makes
	// every Put wait until its record is on stable storage; Puts running at
	// the same moment share one fsync (group commit). Larger values let Put
	// return as soon as the record is in the kernel (where a crash of the
	// process cannot lose it), and the writer fsyncs once that many records
	// have been put or SyncInterval has passed, whichever comes first: a
	// power cut or kernel crash can lose the records not yet fsynced. Zero
	// means 2500 (nsqd's default). To sync on the interval alone, set
	// math.MaxInt.
	SyncEvery int

	// SyncInterval is the longest time put records wait for an fsync when
	// SyncEvery has not been reached. The read cursor and the
	// acknowledgement bitmaps are fsynced on the same tick. Zero means 2
	// seconds (nsqd's default).
	SyncInterval time.Duration

	// NoSync turns every fsync off: records reach the OS but nothing forces
	// them to stable storage. THIS IS UNSAFE: a power cut or kernel crash
	// loses recent records, acknowledged or not. It survives a process crash.
	NoSync bool

	// MaxDiskBytes caps the bytes the queue keeps on disk: what its log,
	// index, time-index and acknowledgement files hold (the active
	// segment's files are preallocated ahead of that: the log by up to 6
	// MiB, the others by up to 256 KiB). At the cap a Put first deletes
	// the oldest segments every consumer has acknowledged that RetainBytes
	// or RetainAge keep (the cap outranks them; not HoldAtOpen and
	// HoldFrom, see Log.HoldFrom); if that leaves no room, it returns
	// ErrDiskFull, or waits if BlockWhenFull is set (honouring its
	// context), until consumers free space. Zero means no cap; a cap too
	// small for an empty log and one record of MinRecordBytes (a few
	// hundred bytes) is refused at Open with ErrInvalidOptions.
	MaxDiskBytes int64

	// BlockWhenFull makes Put wait (honouring its context) instead of
	// returning ErrDiskFull when the disk is full. A Put whose context
	// ends first returns an error wrapping both ErrDiskFull and the
	// context's error.
	BlockWhenFull bool

	// RetainBytes keeps fully acknowledged segments on disk for replay by
	// ReadAt, Scan and SeekTime, oldest deleted first, while they total at
	// most this many bytes. Zero deletes a segment as soon as every record in
	// it is acknowledged (nsqd's behaviour), unless RetainAge keeps it.
	RetainBytes int64

	// RetainAge keeps acknowledged segments whose newest record is younger
	// than this. Zero means age keeps nothing. With both RetainBytes and
	// RetainAge set, a segment is kept only while both allow it.
	RetainAge time.Duration

	// HoldAtOpen keeps every segment, acknowledged or not, from Open until
	// the first [Log.HoldFrom] (a hold, as HoldFrom's): for a caller
	// that rebuilds state of its own from the records after some seq, which
	// housekeeping must not delete before it has read them and said which
	// it still needs (spillq's key state). Default off.
	HoldAtOpen bool

	// Compress stores bodies snappy-compressed when that makes them smaller.
	// Each record is flagged, so logs written with and without it read back
	// the same. Default off.
	Compress bool

	// Logger receives warnings about recovery and damaged data (with
	// segment and offset attributes) and nothing on the hot path. Nil
	// discards.
	Logger *slog.Logger

	// FileMode is the permission of every file the queue creates (its
	// segments, indexes, acknowledgement bitmaps, cursors, the lock file,
	// .bad copies of damaged records), as the umask allows. Its
	// directories get the same bits plus search where there is read:
	// 0600 makes 0700, 0640 makes 0750. Zero means [DefaultFileMode],
	// 0600: the records are whatever a service puts in its jobs, so only
	// the owner may read them. Set 0640 (or 0660) to let the group read
	// them, a backup or an operator's tools say. Allowed: 0600 plus any
	// of the group and other read and write bits; others are refused with
	// ErrInvalidOptions.
	//
	// Open changes the mode of nothing that exists: a queue's directory
	// and files keep theirs, whoever set them, and only files made from
	// then on (new segments and bitmaps, rewritten indexes and markers,
	// new cursors) get FileMode. So a queue made before the default was
	// 0600 (files 0644, directories 0755) stays readable to every user:
	// its old segments until they are consumed, its cursor files and
	// directories for good. Run chmod -R go-rwx on it once to close it.
	// Windows keeps only the read-only bit, which FileMode never sets.
	FileMode fs.FileMode

	// FS is the file system the log works on; nil means the operating
	// system's. It is for this module's tests: its type is internal
	// (internal/vfs), so only they can set it, to run a queue on a file
	// system that loses power (vfs.MemFS, whose CrashClone keeps what was
	// fsynced alone) or fails the calls they pick (vfs.ErrorFS). A queue
	// on a MemFS made by vfs.NewCrashableMem appends with write(2), as
	// off Linux; one made by vfs.NewCrashableMappedMem maps its segments
	// as on Linux.
	FS vfs.FS

	// dirMode is the directories' permission, derived from FileMode by
	// withDefaults.
	dirMode fs.FileMode

	// noIndexForTesting skips writing the sequence and time indexes, so a
	// benchmark can measure what maintaining them costs on the Put path.
	// The resulting queue cannot be reopened.
	noIndexForTesting bool
	// crashPointForTesting, if set, is called at named moments where a
	// crash is most interesting (see crashPoint); the crash test's child
	// kills itself there.
	crashPointForTesting func(point string)
	// emptyHookForTesting, if set, runs in Empty once producers may append
	// again, so a test can make them roll segments right there.
	emptyHookForTesting func()
	// fullHookForTesting, if set, runs when a Put with BlockWhenFull is
	// about to wait for space, so a test can free it only then.
	fullHookForTesting func()
	// housekeepHookForTesting, if set, runs on the writer goroutine when
	// housekeeping is about to delete acknowledged segments, so a test can
	// see what a Put at the budget sees right then.
	housekeepHookForTesting func()
	// writePathForTesting makes Put use write(2) even where segments can
	// be mapped, so tests cover the path other systems take.
	writePathForTesting bool
	// clockForTesting replaces time.Now for record timestamps, so golden
	// files are reproducible and clocks can step backwards on cue.
	clockForTesting func() time.Time
	// openSealedForTesting, if not zero, replaces maxOpenSealed, so a
	// race test with a few segments has them given back and reopened
	// under it all the time.
	openSealedForTesting int
	// openBitmapsForTesting, if not zero, replaces maxOpenBitmaps, so
	// tests have a cursor close and reopen its bitmaps all the time.
	openBitmapsForTesting int
}

// Defaults documented on the Options fields.
const (
	DefaultMaxSegmentBytes = 100 << 20
	DefaultMaxRecordBytes  = 1 << 20
	DefaultSyncEvery       = 2500
	DefaultSyncInterval    = 2 * time.Second
	DefaultFileMode        = fs.FileMode(0o600)
)

// Modes returns the permissions o gives the files and the directories it
// creates, defaults applied: FileMode and the directory mode derived from
// it. An error wraps ErrInvalidOptions. It is for code that keeps files
// of its own beside a queue (spillq's key state) and makes them alike.
func (o Options) Modes() (file, dir fs.FileMode, err error) {
	file = o.FileMode
	if file == 0 {
		file = DefaultFileMode
	}
	if file&^0o666 != 0 || file&0o600 != 0o600 {
		return 0, 0, fmt.Errorf("%w: FileMode %#o is not 0600 plus group and other read and write bits", ErrInvalidOptions, uint32(o.FileMode))
	}
	// Search on a directory wherever its files may be read: without it
	// the read bit would let a group list names and open nothing.
	return file, file | (file&0o444)>>2, nil
}

// MaxRecordBytesLimit is the largest MaxRecordBytes: a frame's length, in
// its int32 prefix, counts the body and 21 bytes of header after it.
const MaxRecordBytesLimit = maxBodyLimit

// minSegmentBytes fits a segment header and one empty record.
const minSegmentBytes = fileHeaderSize + recordHeaderSize

// withDefaults returns a copy of o with defaults filled in, or an error
// naming the first field out of range.
func (o Options) withDefaults() (Options, error) {
	if o.MaxSegmentBytes == 0 {
		o.MaxSegmentBytes = DefaultMaxSegmentBytes
	}
	if o.MaxRecordBytes == 0 {
		o.MaxRecordBytes = DefaultMaxRecordBytes
	}
	if o.SyncEvery == 0 {
		o.SyncEvery = DefaultSyncEvery
	}
	if o.SyncInterval == 0 {
		o.SyncInterval = DefaultSyncInterval
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	o.FS = vfs.Or(o.FS)
	var err error
	if o.FileMode, o.dirMode, err = o.Modes(); err != nil {
		return o, err
	}
	switch {
	case o.MaxSegmentBytes < minSegmentBytes || o.MaxSegmentBytes > math.MaxUint32:
		return o, fmt.Errorf("%w: MaxSegmentBytes %d is outside [%d, %d]", ErrInvalidOptions, o.MaxSegmentBytes, minSegmentBytes, uint64(math.MaxUint32))
	case o.MaxRecordBytes < 0 || o.MaxRecordBytes > MaxRecordBytesLimit:
		return o, fmt.Errorf("%w: MaxRecordBytes %d is outside [0, %d]", ErrInvalidOptions, o.MaxRecordBytes, MaxRecordBytesLimit)
	case int64(o.MaxRecordBytes)+recordHeaderSize+fileHeaderSize > math.MaxUint32:
		return o, fmt.Errorf("%w: MaxRecordBytes %d does not fit a segment", ErrInvalidOptions, o.MaxRecordBytes)
	case o.MinRecordBytes < 0 || o.MinRecordBytes > o.MaxRecordBytes:
		return o, fmt.Errorf("%w: MinRecordBytes %d is outside [0, MaxRecordBytes=%d]", ErrInvalidOptions, o.MinRecordBytes, o.MaxRecordBytes)
	case o.SyncEvery < 0:
		return o, fmt.Errorf("%w: SyncEvery %d is negative", ErrInvalidOptions, o.SyncEvery)
	case o.SyncInterval < 0:
		return o, fmt.Errorf("%w: SyncInterval %v is negative", ErrInvalidOptions, o.SyncInterval)
	case o.MaxDiskBytes < 0:
		return o, fmt.Errorf("%w: MaxDiskBytes %d is negative", ErrInvalidOptions, o.MaxDiskBytes)
	case o.MaxDiskBytes > 0 && o.MaxDiskBytes < minDiskBytes(o.MinRecordBytes):
		// One cursor: a Queue's, the fewest a log that is read has.
		return o, fmt.Errorf("%w: MaxDiskBytes %d cannot hold a single record: an empty log with one cursor and its smallest record take %d bytes of it", ErrInvalidOptions, o.MaxDiskBytes, minDiskBytes(o.MinRecordBytes))
	case o.RetainBytes < 0:
		return o, fmt.Errorf("%w: RetainBytes %d is negative", ErrInvalidOptions, o.RetainBytes)
	case o.RetainAge < 0:
		return o, fmt.Errorf("%w: RetainAge %v is negative", ErrInvalidOptions, o.RetainAge)
	}
	return o, nil
}

// minDiskBytes is the smallest MaxDiskBytes a log with one cursor can put
// a record of minRecord bytes in (what Put's budget check counts).
func minDiskBytes(minRecord int) int64 {
	return emptyLogBytes(1) + budgetFor(int64(frameSize(minRecord)), 1)
}
