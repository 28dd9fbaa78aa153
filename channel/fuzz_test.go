package channel

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

// FuzzDecodeEnvelope: the envelope decoder never panics, rejects what it
// cannot read with ErrBadEnvelope, and what it accepts encodes back to the
// same bytes.
func FuzzDecodeEnvelope(f *testing.F) {
	m := &Message{ID: 42, Body: []byte("body"), Timestamp: time.Unix(0, 1234), Attempts: 3}
	f.Add(appendEnvelope(nil, m))
	m.due, m.expires = 99, 100
	f.Add(appendEnvelope(nil, m))
	m.Key = []byte("customer-7")
	f.Add(appendEnvelope(nil, m))
	m.due, m.expires = 0, 0
	f.Add(appendEnvelope(nil, m))
	f.Add([]byte{1, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}) // flagged, empty key
	f.Add([]byte{1, 3, 0, 0})
	f.Add([]byte{2})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeEnvelope(b)
		if err != nil {
			if !errors.Is(err, ErrBadEnvelope) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if again := appendEnvelope(nil, m); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n got %x\nwant %x", again, b)
		}
	})
}

// FuzzDecodeJournal: the delivery journal's decoder never panics, rejects
// what it cannot read with errBadJournal, and what it accepts encodes back
// to the same bytes.
func FuzzDecodeJournal(f *testing.F) {
	f.Add(appendJournal(nil, journalBackend, 42, 3))
	f.Add(appendJournal(nil, journalTimers, 1<<63, 65535))
	f.Add(appendJournal(nil, 3, 0, 0))
	f.Add([]byte{2, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		store, seq, attempts, err := decodeJournal(b)
		if err != nil {
			if !errors.Is(err, errBadJournal) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if again := appendJournal(nil, store, seq, attempts); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n got %x\nwant %x", again, b)
		}
	})
}
