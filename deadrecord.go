package spillq

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/spillq/spillq/channel"
)

// DeadReason is why a message was dead-lettered: the kind of the reason
// its channel gave the dead-letter handler.
type DeadReason uint8

const (
	// DeadOther is a reason of no kind below (a handler's own).
	DeadOther DeadReason = iota
	// DeadMaxAttempts: delivered MaxAttempts times without being finished
	// (channel.ErrMaxAttempts).
	DeadMaxAttempts
	// DeadFailed: a consumer gave up on it (channel.Message.Fail,
	// channel.ErrFailed).
	DeadFailed
	// DeadExpired: its Expires time passed before delivery
	// (channel.ErrExpired).
	DeadExpired
)

// String returns the name the CLI shows and takes: other, max-attempts,
// failed or expired.
func (r DeadReason) String() string {
	switch r {
	case DeadOther:
		return "other"
	case DeadMaxAttempts:
		return "max-attempts"
	case DeadFailed:
		return "failed"
	case DeadExpired:
		return "expired"
	}
	return fmt.Sprintf("DeadReason(%d)", uint8(r))
}

// MarshalText makes a DeadReason its name in JSON.
func (r DeadReason) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// deadReason classifies a dead-letter handler's reason.
func deadReason(reason error) DeadReason {
	switch {
	case errors.Is(reason, channel.ErrFailed):
		return DeadFailed
	case errors.Is(reason, channel.ErrMaxAttempts):
		return DeadMaxAttempts
	case errors.Is(reason, channel.ErrExpired):
		return DeadExpired
	}
	return DeadOther
}

// DeadLetter is a message in a dead-letter store ([DeadLetters]).
type DeadLetter struct {
	// ID, Key and Body are the message's; PutAt is when it was first put.
	ID    channel.ID
	Key   []byte
	Body  []byte
	PutAt time.Time
	// DeadAt is when it was dead-lettered; Attempts the deliveries it had.
	DeadAt   time.Time
	Attempts uint16
	// Reason is the kind of why; Error the reason's whole text, which
	// names the handler's error of the last attempt (channel.Message.Retry,
	// Fail), cut at MaxDeadErrorBytes.
	Reason DeadReason
	Error  string
	// Seq is the letter's record in the store: two letters of one message
	// (a store holds one per ID, but one written by an older build may
	// hold two, stored twice by a crash while it was dead-lettered) differ
	// in it.
	Seq uint64
}

// The dead-letter record: a dead letter as the store keeps it. Part of the
// on-disk format (FORMAT.md, "Dead-letter store").
//
//	0     1        2        10          18           26            28          30            32
//	| ver | reason | id u64 | putAt i64 | deadAt i64 | attempts u16 | keyLen u16 | errLen u16 | key | error | body
const (
	deadRecordVersion = 1
	deadFixedSize     = 32
)

// MaxDeadErrorBytes is the longest error text a dead letter keeps; a
// longer one is cut at a UTF-8 boundary.
const MaxDeadErrorBytes = 4096

// ErrNotDeadLetter reports a record of a dead-letter store that is not a
// dead letter (damaged, or written by a later version): [DecodeDeadLetter]
// returns it, and [DeadLetters.List] and [ListDeadLetters] yield it, with
// the record's seq, and go on.
var ErrNotDeadLetter = errors.New("spillq: not a dead-letter record")

// appendDeadRecord appends d's record to dst; its error text is cut to
// MaxDeadErrorBytes, and further, if need be, for the record to fit in
// maxRecord bytes (the store's limit; 0: none).
func appendDeadRecord(dst []byte, d *DeadLetter, maxRecord int) []byte {
	msg := cutText(d.Error, MaxDeadErrorBytes)
	if maxRecord > 0 {
		if room := maxRecord - deadFixedSize - len(d.Key) - len(d.Body); room < len(msg) {
			msg = cutText(msg, max(room, 0))
		}
	}
	dst = append(dst, deadRecordVersion, byte(d.Reason))
	dst = binary.BigEndian.AppendUint64(dst, uint64(d.ID))
	dst = binary.BigEndian.AppendUint64(dst, uint64(unixNanos(d.PutAt)))
	dst = binary.BigEndian.AppendUint64(dst, uint64(unixNanos(d.DeadAt)))
	dst = binary.BigEndian.AppendUint16(dst, d.Attempts)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(d.Key)))
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(msg)))
	dst = append(dst, d.Key...)
	dst = append(dst, msg...)
	return append(dst, d.Body...)
}

// decodeDeadRecord decodes a dead-letter record. Key and Body alias rec.
func decodeDeadRecord(rec []byte) (DeadLetter, error) {
	if len(rec) < deadFixedSize {
		return DeadLetter{}, fmt.Errorf("%w: %d bytes, the header alone is %d", ErrNotDeadLetter, len(rec), deadFixedSize)
	}
	if rec[0] != deadRecordVersion {
		return DeadLetter{}, fmt.Errorf("%w: version %d (this build reads %d)", ErrNotDeadLetter, rec[0], deadRecordVersion)
	}
	keyLen := int(binary.BigEndian.Uint16(rec[28:]))
	errLen := int(binary.BigEndian.Uint16(rec[30:]))
	if errLen > MaxDeadErrorBytes {
		return DeadLetter{}, fmt.Errorf("%w: error text of %d bytes, at most %d are written", ErrNotDeadLetter, errLen, MaxDeadErrorBytes)
	}
	if deadFixedSize+keyLen+errLen > len(rec) {
		return DeadLetter{}, fmt.Errorf("%w: key of %d bytes and error of %d overrun the record's %d", ErrNotDeadLetter, keyLen, errLen, len(rec))
	}
	d := DeadLetter{
		Reason:   DeadReason(rec[1]),
		ID:       channel.ID(binary.BigEndian.Uint64(rec[2:])),
		PutAt:    fromUnixNanos(int64(binary.BigEndian.Uint64(rec[10:]))),
		DeadAt:   fromUnixNanos(int64(binary.BigEndian.Uint64(rec[18:]))),
		Attempts: binary.BigEndian.Uint16(rec[26:]),
	}
	rest := rec[deadFixedSize:]
	if keyLen > 0 {
		d.Key = rest[:keyLen:keyLen]
	}
	d.Error = string(rest[keyLen : keyLen+errLen])
	d.Body = rest[keyLen+errLen:]
	return d, nil
}

// unixNanos is t in Unix nanoseconds, 0 for the zero Time (which has none).
func unixNanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromUnixNanos(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// cutText cuts s to at most n bytes, at a UTF-8 boundary.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
