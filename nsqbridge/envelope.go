package nsqbridge

import (
	"encoding/binary"
	"fmt"
	"strings"
	"time"
)

// The envelope a published message travels in through the local queue: the
// body of every record a Publisher writes. Part of the on-disk format
// (FORMAT.md, "Publisher envelope").
//
//	0     1       2           3             3+n
//	| ver | flags | topic len | topic (n B) | [due i64, if flag bit 0] | body
const (
	envelopeVersion = 1
	envFlagDue      = 1 << 0
	envKnownFlags   = envFlagDue
	envFixedSize    = 3
	// maxTopicLen is nsqd's limit on topic names; the length fits in a byte.
	maxTopicLen = 64
	// maxEnvelopeOverhead is the most bytes an envelope adds to a body.
	maxEnvelopeOverhead = envFixedSize + maxTopicLen + 8
)

// envelope is a decoded local record. topic and body alias the record.
type envelope struct {
	topic []byte
	due   int64 // Unix ns: deliver not before (DPUB); 0 for a plain publish
	body  []byte
}

// appendEnvelope appends the record for body to dst. topic is at most
// maxTopicLen bytes (Publish checks it); due is zero or a Unix ns time.
func appendEnvelope(dst []byte, topic string, due int64, body []byte) []byte {
	var flags byte
	if due != 0 {
		flags |= envFlagDue
	}
	dst = append(dst, envelopeVersion, flags, byte(len(topic)))
	dst = append(dst, topic...)
	if due != 0 {
		dst = binary.BigEndian.AppendUint64(dst, uint64(due))
	}
	return append(dst, body...)
}

// decodeEnvelope parses a local record; the result aliases b.
func decodeEnvelope(b []byte) (envelope, error) {
	if len(b) < envFixedSize {
		return envelope{}, fmt.Errorf("%w: %d bytes", ErrBadEnvelope, len(b))
	}
	if b[0] != envelopeVersion {
		return envelope{}, fmt.Errorf("%w: envelope version %d", ErrBadEnvelope, b[0])
	}
	flags := b[1]
	if flags&^envKnownFlags != 0 {
		return envelope{}, fmt.Errorf("%w: unknown flags %#x", ErrBadEnvelope, flags)
	}
	n := int(b[2])
	rest := b[envFixedSize:]
	if n == 0 || n > maxTopicLen || len(rest) < n {
		return envelope{}, fmt.Errorf("%w: topic length %d", ErrBadEnvelope, n)
	}
	e := envelope{topic: rest[:n]}
	rest = rest[n:]
	if flags&envFlagDue != 0 {
		if len(rest) < 8 {
			return envelope{}, fmt.Errorf("%w: truncated due time", ErrBadEnvelope)
		}
		e.due = int64(binary.BigEndian.Uint64(rest))
		if e.due == 0 {
			// Zero means "not deferred" and is never written with its flag.
			return envelope{}, fmt.Errorf("%w: flagged due time is zero", ErrBadEnvelope)
		}
		rest = rest[8:]
	}
	e.body = rest
	return e, nil
}

// delay is how long nsqd should still defer the message at now: zero for a
// plain publish or one already due. nsqd counts DPUB delays in whole
// milliseconds.
func (e envelope) delay(now time.Time) time.Duration {
	if e.due == 0 {
		return 0
	}
	d := time.Duration(e.due - now.UnixNano()).Truncate(time.Millisecond)
	if d < time.Millisecond {
		return 0
	}
	return d
}

// validTopic is nsqd's rule for topic names (go-nsq's IsValidTopicName,
// without its regular expression, which cost an eighth of the forwarding
// CPU): 1 to 64 bytes of [.a-zA-Z0-9_-], optionally ending in
// "#ephemeral".
func validTopic(name string) bool {
	if len(name) < 1 || len(name) > maxTopicLen {
		return false
	}
	name = strings.TrimSuffix(name, "#ephemeral")
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return false
		}
	}
	return true
}
