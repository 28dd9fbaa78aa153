package channel

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"time"
	"unsafe"
)

// ID identifies a message for its whole life, across requeues, spills and
// restarts.
type ID uint64

// String formats the ID as 16 hex digits.
func (id ID) String() string {
	s := strconv.FormatUint(uint64(id), 16)
	return "0000000000000000"[len(s):] + s
}

// Message is one message delivered by a [Channel]. Body belongs to the
// consumer; the other exported fields are read-only. A message is in flight
// from delivery until [Message.Finish] or [Message.Requeue], or until its
// timeout delivers it again.
//
// Message methods are safe for concurrent use.
type Message struct {
	ID        ID
	Body      []byte
	Timestamp time.Time // when the message was first Put (to a diskqueue.Log: see FORMAT.md's put time)
	Attempts  uint16    // deliveries so far, this one included

	// Owned by the channel; guarded by its in-flight shard's lock while in
	// flight (see flightList), by ch.mu while ready or deferred, and by the
	// goroutine holding it otherwise. The small fields fill the padding
	// after Attempts, and acker is one word, not an interface's two, so a
	// Message is 160 bytes with jrec, not 168 (176 allocated alone):
	// every message put to memory or read back from the backend is
	// allocated, and the collector runs in proportion.
	src   msgSource // where seq is a record to acknowledge when done
	state msgState
	gen   uint32 // Channel.gen when the message was put or read; Empty makes it stale

	// Key is the message's key ([PutOptions].Key), nil for none: what the
	// channel's key policy (Options.Keys) goes by.
	Key []byte

	ch       *Channel
	due      int64 // Unix ns: not to be delivered before this (deferred)
	expires  int64 // Unix ns: dead-lettered if not delivered by then; 0 never
	deadline int64 // Unix ns: in-flight timeout
	seq      uint64
	prev     *Message // in-flight list, ordered by deadline
	next     *Message
	acker    *foreignAcker // set for messages delivered by another source (NewMessage)
	// jrec is 1 + the seq of the message's record in the delivery journal
	// (Options.Deliveries), 0 for none: the one that counts its
	// deliveries, acknowledged when a newer one is written or the
	// message's record is (see journal.go).
	jrec uint64
}

// The size the comment above counts on, checked at compile time.
var _ = [1]struct{}{}[unsafe.Sizeof(Message{})-160]

// foreignAcker boxes the Acker of a message from another source, so that
// a Message holds one word for it (see Message).
type foreignAcker struct{ Acker }

// Due is the time before which a stored message is not to be delivered:
// the due time it was put or requeued with (a Delay), or stored with (what
// a topic's channel keeps in its timer store at Close is due then); the
// zero Time if it carries none. It is for tools reading a timer store's
// records ([UnmarshalMessage]): a message Receive hands out has come due,
// and its Due is the zero Time.
func (m *Message) Due() time.Time {
	if m.due == 0 {
		return time.Time{}
	}
	return time.Unix(0, m.due)
}

type msgState uint8

// msgSource is the store holding a message's record, if any.
type msgSource uint8

const (
	srcMemory  msgSource = iota // no record: the message is in memory only
	srcBackend                  // seq is a record in the Backend
	srcTimers                   // seq is a record in the timer store
)

const (
	stateQueued msgState = iota
	stateInFlight
	stateDone
)

// The envelope a message travels in when it goes to the backend. Part of
// the on-disk format (FORMAT.md, "Channel message envelope").
//
//	0     1       2          10            12          20
//	| ver | flags | id u64   | attempts u16 | ts i64    | [due i64] [expires i64] [key len u16, key] | body
const (
	envelopeVersion = 1
	envFlagDue      = 1 << 0
	envFlagExpires  = 1 << 1
	envFlagKey      = 1 << 2
	envKnownFlags   = envFlagDue | envFlagExpires | envFlagKey
	envFixedSize    = 20
	envStampAt      = 12 // where the timestamp is
)

// MaxKeyBytes is the longest key a message may carry ([PutOptions].Key).
// A key is stored in the message's envelope, with a 2-byte length, so it
// counts toward the backend's record limit with the body: a message's body
// may be len(key)+2 bytes shorter than one without a key.
const MaxKeyBytes = 1024

// keyOverhead is what a key adds to an envelope.
func keyOverhead(key []byte) int {
	if key == nil {
		return 0
	}
	return 2 + len(key)
}

// MinEnvelopeOverhead and MaxEnvelopeOverhead are the fewest and the most
// bytes a [Channel] adds to a body when it writes the message to its
// backend: the fixed envelope header, then up to a due time and an expiry.
// A backend that limits its records to N bytes can hold any body of up to
// N - MaxEnvelopeOverhead bytes, whatever happens to the message later (a
// Requeue with a delay adds a due time).
const (
	MinEnvelopeOverhead = envFixedSize
	MaxEnvelopeOverhead = envFixedSize + 8 + 8
)

func appendEnvelope(dst []byte, m *Message) []byte {
	return append(appendEnvelopeHead(dst, m), m.Body...)
}

// appendEnvelopeHead appends m's envelope but for the body: what
// putDisk hands the log to store in front of the body.
func appendEnvelopeHead(dst []byte, m *Message) []byte {
	var flags byte
	if m.due != 0 {
		flags |= envFlagDue
	}
	if m.expires != 0 {
		flags |= envFlagExpires
	}
	if m.Key != nil {
		flags |= envFlagKey
	}
	dst = append(dst, envelopeVersion, flags)
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.ID))
	dst = binary.BigEndian.AppendUint16(dst, m.Attempts)
	dst = binary.BigEndian.AppendUint64(dst, uint64(m.Timestamp.UnixNano()))
	if m.due != 0 {
		dst = binary.BigEndian.AppendUint64(dst, uint64(m.due))
	}
	if m.expires != 0 {
		dst = binary.BigEndian.AppendUint64(dst, uint64(m.expires))
	}
	if m.Key != nil {
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(m.Key)))
		dst = append(dst, m.Key...)
	}
	return dst
}

// envelopeHasDue reports whether b is an envelope that carries a due time,
// without decoding the rest.
func envelopeHasDue(b []byte) bool {
	return len(b) >= envFixedSize && b[0] == envelopeVersion && b[1]&envFlagDue != 0
}

// envelopeDue returns the due time an envelope carries, or 0 for none (or
// for bytes that are not an envelope, which decodeEnvelope reports),
// without decoding the rest.
func envelopeDue(b []byte) int64 {
	if !envelopeHasDue(b) || len(b) < envFixedSize+8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(b[envFixedSize:]))
}

// decodeEnvelope parses a backend record. The body and key alias b.
func decodeEnvelope(b []byte) (*Message, error) {
	m := new(Message)
	if err := decodeEnvelopeInto(b, m); err != nil {
		return nil, err
	}
	return m, nil
}

// RecordKey returns the key and ID of a record a Channel wrote to its
// Backend, as UnmarshalMessage would decode them, without allocating; ok
// is false for a record without a key or that is not a message. The key
// aliases record.
func RecordKey(record []byte) (key []byte, id ID, ok bool) {
	var m Message
	if decodeEnvelopeInto(record, &m) != nil || m.Key == nil {
		return nil, 0, false
	}
	return m.Key, m.ID, true
}

// RecordDeferred reports whether a record a Channel wrote to its Backend
// carries a due time (a message put or requeued with a delay), without
// decoding the rest: what [Channel.Compacted] is told.
func RecordDeferred(record []byte) bool { return envelopeHasDue(record) }

// decodeEnvelopeInto is decodeEnvelope into m, which must be the zero
// Message. It stores field by field: assigning a whole Message literal
// goes through a temporary and a typed copy, which while the collector
// runs takes a write barrier per pointer word, and the pump decodes every
// record it reads. On an error m holds part of the record.
func decodeEnvelopeInto(b []byte, m *Message) error {
	if len(b) < envFixedSize {
		return fmt.Errorf("%w: %d bytes", ErrBadEnvelope, len(b))
	}
	if b[0] != envelopeVersion {
		return fmt.Errorf("%w: envelope version %d", ErrBadEnvelope, b[0])
	}
	flags := b[1]
	if flags&^envKnownFlags != 0 {
		return fmt.Errorf("%w: unknown flags %#x", ErrBadEnvelope, flags)
	}
	m.ID = ID(binary.BigEndian.Uint64(b[2:10]))
	m.Attempts = binary.BigEndian.Uint16(b[10:12])
	m.Timestamp = time.Unix(0, int64(binary.BigEndian.Uint64(b[12:20])))
	rest := b[envFixedSize:]
	if flags&(envFlagDue|envFlagExpires) != 0 {
		var err error
		if flags&envFlagDue != 0 {
			if m.due, rest, err = envelopeTime(rest); err != nil {
				return err
			}
		}
		if flags&envFlagExpires != 0 {
			if m.expires, rest, err = envelopeTime(rest); err != nil {
				return err
			}
		}
	}
	if flags&envFlagKey != 0 {
		if len(rest) < 2 {
			return fmt.Errorf("%w: truncated key length", ErrBadEnvelope)
		}
		n := int(binary.BigEndian.Uint16(rest))
		if n == 0 || n > MaxKeyBytes || len(rest) < 2+n {
			// Zero is "no key", never written with its flag set.
			return fmt.Errorf("%w: key of %d bytes (%d left, 1 to %d allowed)", ErrBadEnvelope, n, len(rest)-2, MaxKeyBytes)
		}
		m.Key = rest[2 : 2+n : 2+n]
		rest = rest[2+n:]
	}
	m.Body = rest
	return nil
}

// envelopeTime reads one of an envelope's flagged times from the front of
// rest.
func envelopeTime(rest []byte) (int64, []byte, error) {
	if len(rest) < 8 {
		return 0, nil, fmt.Errorf("%w: truncated header", ErrBadEnvelope)
	}
	t := int64(binary.BigEndian.Uint64(rest))
	if t == 0 {
		// Zero means "absent" and is never written with its flag set.
		return 0, nil, fmt.Errorf("%w: flagged time is zero", ErrBadEnvelope)
	}
	return t, rest[8:], nil
}

// MarshalMessage encodes body as a channel message record, as a Channel
// writes it to its Backend: for tools that feed a channel's backend
// directly (cmd/spillq put -channel). The message gets id and timestamp ts,
// no attempts, no delay.
func MarshalMessage(id ID, ts time.Time, body []byte) []byte {
	return appendEnvelope(nil, &Message{ID: id, Timestamp: ts, Body: body})
}

// UnmarshalMessage decodes a record a Channel wrote to its Backend, for
// tools that read the backend directly. The returned message is not in
// flight: its Finish, Requeue and Touch return ErrNotInFlight. Body
// aliases record.
func UnmarshalMessage(record []byte) (*Message, error) {
	m, err := decodeEnvelope(record)
	if err != nil {
		return nil, err
	}
	m.ch = detached
	m.state = stateDone
	return m, nil
}

// detached is the channel of messages decoded outside any channel, so their
// methods report ErrNotInFlight rather than crash.
var detached = &Channel{}

// Receiver is what a worker needs from a source of messages. A Channel is
// one; nsqbridge.Consumer, reading from an nsqd cluster, is another, so a
// worker written against this interface moves between them unchanged.
type Receiver interface {
	Receive(ctx context.Context) (*Message, error)
}

// Acker answers messages on behalf of a source other than a Channel (see
// NewMessage): each method is what the [Message] method of its name does
// there (Requeue carries [Message.Retry]'s cause, nil for a plain
// Requeue).
type Acker interface {
	Finish(m *Message) error
	Requeue(m *Message, delay time.Duration, cause error) error
	Touch(m *Message) error
	Release(m *Message, delay time.Duration) error
	Fail(m *Message, cause error) error
}

// NewMessage returns a message delivered by another source, such as an
// nsqd consumer, whose Finish, Requeue and Touch call a. Workers handle it
// exactly like a message from a Channel.
func NewMessage(id ID, body []byte, ts time.Time, attempts uint16, a Acker) *Message {
	return &Message{ID: id, Body: body, Timestamp: ts, Attempts: attempts, acker: &foreignAcker{a}, ch: detached, state: stateDone}
}
