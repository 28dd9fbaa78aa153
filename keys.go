package spillq

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"iter"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/internal/vfs"
)

// KeysDir is the subdirectory of a queue's directory that holds the key
// policy's state (Options.Keys; FORMAT.md, "Key state"): one file, state.
const KeysDir = "keys"

// fileModes say how spillq makes the files and directories beside its
// logs (the key state, a topic's channels/): on the logs' file system
// (diskqueue.Options.FS, the OS's unless a test gives one) and with the
// logs' permissions (diskqueue.Options.FileMode).
type fileModes struct {
	fs        vfs.FS
	file, dir fs.FileMode
}

// modesOf returns o's file system and modes; logOptions has refused any
// mode it has not.
func modesOf(o diskqueue.Options) fileModes {
	file, dir, _ := o.Modes()
	return fileModes{vfs.Or(o.FS), file, dir}
}

// keyStateFile is where the key state lives in dir.
func keyStateFile(dir string) string { return filepath.Join(dir, KeysDir, "state") }

// The key state file: a header, the entries, a CRC-32C of all before it.
// Version 2 added the timer mark; version 1 files are still read.
const (
	keyMagic        = "SPKY"
	keyVersion      = 2
	keyHeaderSizeV1 = 4 + 1 + 1 + 2 + 8 + 4
	keyHeaderSize   = keyHeaderSizeV1 + 8
	keyEntryFixed   = 2 + 8 + 8 + 8
)

// keyFile is what the key state file holds: the channel's (or topic's)
// snapshot, and timerMark, the queue's timer store's next seq when it was
// taken (or a little before): under KeyDedup every keyed message put to
// the timer store below it is in the entries, unless done, so a restart
// reads the timer store from there, as it reads the log from the
// watermark. A topic's channels' timer stores take no keyed Put (a
// topic's keyed message goes to its log), so a topic stores 0;
// noTimerMark says there is none.
type keyFile struct {
	channel.KeyState
	timerMark uint64
}

// noTimerMark is the timer mark of a version 1 file, which had none: a
// KeyDedup restart reads the timer store's records of the last window.
const noTimerMark = math.MaxUint64

var keyCRC = crc32.MakeTable(crc32.Castagnoli)

// errBadKeyState reports a key state file that does not decode.
var errBadKeyState = errors.New("spillq: key state file is damaged")

func encodeKeyState(st keyFile) []byte {
	b := make([]byte, 0, keyHeaderSize+len(st.Entries)*(keyEntryFixed+16)+4)
	b = append(b, keyMagic...)
	b = append(b, keyVersion, byte(st.Policy), 0, 0)
	b = binary.BigEndian.AppendUint64(b, st.Watermark)
	b = binary.BigEndian.AppendUint64(b, st.timerMark)
	b = binary.BigEndian.AppendUint32(b, uint32(len(st.Entries)))
	for _, e := range st.Entries {
		b = binary.BigEndian.AppendUint16(b, uint16(len(e.Key)))
		b = append(b, e.Key...)
		b = binary.BigEndian.AppendUint64(b, uint64(e.ID))
		b = binary.BigEndian.AppendUint64(b, e.Seq)
		var at int64
		if !e.At.IsZero() {
			at = e.At.UnixNano()
		}
		b = binary.BigEndian.AppendUint64(b, uint64(at))
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, keyCRC))
}

func decodeKeyState(b []byte) (keyFile, error) {
	var st keyFile
	if len(b) < keyHeaderSizeV1+4 || string(b[:4]) != keyMagic {
		return st, fmt.Errorf("%w: no header", errBadKeyState)
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, keyCRC) != sum {
		return st, fmt.Errorf("%w: checksum mismatch", errBadKeyState)
	}
	header := keyHeaderSize
	switch b[4] {
	case 1:
		header, st.timerMark = keyHeaderSizeV1, noTimerMark
	case keyVersion:
		if len(body) < keyHeaderSize {
			return st, fmt.Errorf("%w: no header", errBadKeyState)
		}
		st.timerMark = binary.BigEndian.Uint64(b[16:24])
	default:
		return st, fmt.Errorf("%w: version %d", errBadKeyState, b[4])
	}
	st.Policy = channel.KeyPolicy(b[5])
	st.Watermark = binary.BigEndian.Uint64(b[8:16])
	n := binary.BigEndian.Uint32(b[header-4 : header])
	rest := body[header:]
	if uint64(n)*keyEntryFixed > uint64(len(rest)) {
		return st, fmt.Errorf("%w: %d entries in %d bytes", errBadKeyState, n, len(rest))
	}
	st.Entries = make([]channel.KeyEntry, 0, n)
	for range n {
		if len(rest) < 2 {
			return st, fmt.Errorf("%w: truncated entry", errBadKeyState)
		}
		kl := int(binary.BigEndian.Uint16(rest))
		if kl == 0 || kl > channel.MaxKeyBytes || len(rest) < keyEntryFixed+kl {
			return st, fmt.Errorf("%w: entry with a key of %d bytes", errBadKeyState, kl)
		}
		e := channel.KeyEntry{Key: string(rest[2 : 2+kl])}
		rest = rest[2+kl:]
		e.ID = channel.ID(binary.BigEndian.Uint64(rest))
		e.Seq = binary.BigEndian.Uint64(rest[8:])
		if at := int64(binary.BigEndian.Uint64(rest[16:])); at != 0 {
			e.At = time.Unix(0, at)
		}
		rest = rest[24:]
		st.Entries = append(st.Entries, e)
	}
	if len(rest) != 0 {
		return st, fmt.Errorf("%w: %d bytes after the entries", errBadKeyState, len(rest))
	}
	return st, nil
}

// saveKeyState stores st crash-safely: a temporary file, fsynced, renamed
// over the old one, the directory fsynced. A crash leaves the old state or
// the new, each good for a restart (the tail after its watermark is read).
// The file is made with modes.file each time, so one stored before the
// default was 0600 is not kept readable to others.
func saveKeyState(dir string, modes fileModes, st keyFile) error {
	kd := filepath.Join(dir, KeysDir)
	if err := vfs.MkdirAllSynced(modes.fs, kd, modes.dir); err != nil {
		return err
	}
	tmp := keyStateFile(dir) + ".tmp"
	f, err := modes.fs.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, modes.file)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(encodeKeyState(st), 0); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := modes.fs.Rename(tmp, keyStateFile(dir)); err != nil {
		return err
	}
	return modes.fs.SyncDir(kd)
}

// orDiscard returns logger, or one that discards if it is nil.
func orDiscard(logger *slog.Logger) *slog.Logger {
	if logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return logger
}

// keepsKeyState reports whether policy keeps state across restarts.
func keepsKeyState(policy channel.KeyPolicy) bool {
	return policy == channel.KeyUnique || policy == channel.KeyReplace || policy == channel.KeyDedup
}

// keyLog is the log a key state is kept for: a queue's (its Acknowledged
// is its own cursor's) or a topic's (every channel's).
type keyLog interface {
	Scan(from, to uint64) iter.Seq2[diskqueue.Record, error]
	SeekTime(t time.Time) (uint64, error)
	NextSeq() uint64
	Floor() uint64
	Acknowledged(seq uint64) bool
	HoldFrom(seq uint64)
	Stats() diskqueue.Stats
}

// loadKeyState rebuilds the key policy's state at Open: the stored
// snapshot, less what was acknowledged since, plus the keyed records put
// after its watermark (the tail). Without a usable snapshot it reads the
// records a policy can still need: for KeyDedup those of the last window
// (through the time index), for the others the unacknowledged backlog,
// once. Open costs the number of keys plus the tail, never a read of the
// whole log.
//
// Under KeyDedup a queue's timer store (timers; nil for a topic, whose
// keyed messages all go to its log) is read the same way, from the
// stored timer mark: a key put with a Delay has its record there only.
//
// A restart before the state is stored again reads the log (and the timer
// store) from where this one did, so it holds their segments from there on
// (diskqueue.Log.HoldFrom; both were opened with HoldAtOpen). window is
// the DedupWindow option: zero means the default.
func loadKeyState(dir string, modes fileModes, q, timers keyLog, policy channel.KeyPolicy, window time.Duration, logger *slog.Logger) (*channel.KeyState, error) {
	if window <= 0 {
		window = channel.DefaultDedupWindow
	}
	if policy != channel.KeyDedup {
		timers = nil
	}
	st := &channel.KeyState{Policy: policy}
	from := q.Floor()
	timerFrom := uint64(noTimerMark)
	b, err := vfs.ReadFile(modes.fs, keyStateFile(dir))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, fmt.Errorf("spillq: read key state: %w", err)
	default:
		stored, derr := decodeKeyState(b)
		switch {
		case derr != nil:
			logger.Warn("spillq: key state file is damaged; rebuilding it from the queue's records", "err", derr)
		case stored.Policy != policy:
			logger.Warn("spillq: key state is of another policy; rebuilding it from the queue's records", "stored", stored.Policy, "policy", policy)
		case stored.Watermark > q.NextSeq():
			// Stored ahead of the log's end: a power cut took records the
			// state had seen (a state from before states were stored only
			// after an fsync of the log up to their watermark). Those
			// records' keys go with them; the rest holds, every record
			// left being below the watermark. Stored corrected at once:
			// the records put from now on take the lost seqs, and a
			// rebuild from the old watermark would not read them.
			next := q.NextSeq()
			logger.Warn("spillq: the key state names records a power cut took from the log; forgetting their keys", "watermark", stored.Watermark, "log_end", next)
			st.Entries = slices.DeleteFunc(stored.Entries, func(e channel.KeyEntry) bool { return e.Seq >= next })
			st.Watermark = next
			if timers != nil && stored.timerMark != noTimerMark {
				timerFrom = min(stored.timerMark, timers.NextSeq())
			}
			if err := saveKeyState(dir, modes, keyFile{KeyState: *st, timerMark: timerFrom}); err != nil {
				return nil, fmt.Errorf("spillq: store the corrected key state: %w", err)
			}
			from = next
		default:
			st.Entries = stored.Entries
			from = max(stored.Watermark, from)
			if policy == channel.KeyDedup {
				from = stored.Watermark // acknowledged puts count too
			}
			if timers != nil && stored.timerMark != noTimerMark {
				timerFrom = min(stored.timerMark, timers.NextSeq())
			}
		}
	}
	if first := q.Stats().FirstSeq; from < first {
		// Deleted since the state was stored, though the hold keeps them
		// (Empty discards them, or a hand removed files). Under KeyDedup
		// their keys are forgotten; under the others they were
		// acknowledged.
		if policy == channel.KeyDedup {
			logger.Warn("spillq: the records put after the key state was stored were deleted; their keys are not remembered as put", "from", from, "first", first)
		}
		from = first
	}
	now := time.Now()
	// The records of the last window, where no mark says what the state
	// has seen: a record stored before it holds a key put before it
	// (another error leaves what the caller had).
	sinceWindow := func(l keyLog, or uint64) uint64 {
		seq, err := l.SeekTime(now.Add(-window))
		switch {
		case err == nil:
			return seq
		case errors.Is(err, diskqueue.ErrNotFound):
			return l.NextSeq()
		}
		return or
	}
	if policy == channel.KeyDedup && len(st.Entries) == 0 {
		from = sinceWindow(q, from)
	}
	if timers != nil {
		if timerFrom == noTimerMark {
			timerFrom = sinceWindow(timers, 0)
		}
		timerFrom = max(timerFrom, timers.Stats().FirstSeq)
	}
	// What the snapshot names and was acknowledged since is done.
	kept := st.Entries[:0]
	for _, e := range st.Entries {
		switch policy {
		case channel.KeyUnique:
			if q.Acknowledged(e.Seq) {
				continue
			}
		case channel.KeyDedup:
			if now.Sub(e.At) >= window {
				continue
			}
		}
		kept = append(kept, e)
	}
	st.Entries = kept
	var index map[string]int // made at the tail's first keyed record: a clean Close leaves no tail
	add := func(l keyLog, from uint64, inLog bool) error {
		for rec, err := range l.Scan(from, math.MaxUint64) {
			if errors.Is(err, diskqueue.ErrCorrupt) {
				continue // never delivered: nothing to remember
			}
			if err != nil {
				return fmt.Errorf("spillq: rebuild key state: %w", err)
			}
			m, err := channel.UnmarshalMessage(rec.Body)
			if err != nil || m.Key == nil {
				continue
			}
			if policy == channel.KeyUnique && q.Acknowledged(rec.Seq) {
				continue
			}
			if policy == channel.KeyDedup && now.Sub(m.Timestamp) >= window {
				continue
			}
			if index == nil {
				index = make(map[string]int, len(st.Entries))
				for i, e := range st.Entries {
					index[e.Key] = i
				}
			}
			// Seq names a log record; a timer store's record is named
			// by the key's put time alone (KeyDedup needs no more).
			e := channel.KeyEntry{Key: string(m.Key), ID: m.ID, At: m.Timestamp}
			if inLog {
				e.Seq = rec.Seq
			}
			if i, ok := index[e.Key]; ok {
				// The newer message wins, by ID: a record stored again at
				// Close can sit after a newer version's.
				if e.ID > st.Entries[i].ID {
					st.Entries[i] = e
				}
				continue
			}
			index[e.Key] = len(st.Entries)
			st.Entries = append(st.Entries, e)
		}
		return nil
	}
	if err := add(q, from, true); err != nil {
		return nil, err
	}
	if timers != nil {
		if err := add(timers, timerFrom, false); err != nil {
			return nil, err
		}
		timers.HoldFrom(timerFrom)
	}
	q.HoldFrom(from)
	return st, nil
}
