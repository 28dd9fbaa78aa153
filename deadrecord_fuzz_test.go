package spillq

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/spillq/spillq/channel"
)

// FuzzDecodeDeadRecord: the dead-letter record decoder never panics,
// rejects what it cannot read with ErrNotDeadLetter, and what it accepts
// encodes back to the same bytes.
func FuzzDecodeDeadRecord(f *testing.F) {
	f.Add(appendDeadRecord(nil, &DeadLetter{ID: 1, Body: []byte("job"), PutAt: time.Unix(0, 1_700_000_000_000_000_000), DeadAt: time.Unix(0, 1_700_000_001_000_000_000), Attempts: 5, Reason: DeadMaxAttempts, Error: "channel: message exceeded its delivery attempts (5): last attempt: upstream 503"}, 0))
	f.Add(appendDeadRecord(nil, &DeadLetter{ID: 1 << 62, Key: []byte("order-7"), Reason: DeadFailed, Error: "channel: message failed: bad json"}, 0))
	f.Add(appendDeadRecord(nil, &DeadLetter{Reason: DeadExpired}, 0))
	f.Add([]byte{2, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := decodeDeadRecord(b)
		if err != nil {
			if !errors.Is(err, ErrNotDeadLetter) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if again := appendDeadRecord(nil, &d, 0); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n got %x\nwant %x", again, b)
		}
	})
}

// TestDeadRecordCutsTheError: an error text past MaxDeadErrorBytes, or past
// what the store's record limit leaves beside the body, is cut at a UTF-8
// boundary, and the record still decodes.
func TestDeadRecordCutsTheError(t *testing.T) {
	long := strings.Repeat("é", MaxDeadErrorBytes) // 2 bytes each
	d := DeadLetter{ID: 9, Key: []byte("k"), Body: make([]byte, 100), Error: long, Reason: deadReason(channel.ErrExpired)}
	for _, limit := range []int{0, deadFixedSize + 1 + 100 + 11} {
		rec := appendDeadRecord(nil, &d, limit)
		got, err := decodeDeadRecord(rec)
		if err != nil {
			t.Fatalf("limit %d: %v", limit, err)
		}
		if limit > 0 && len(rec) > limit {
			t.Errorf("limit %d: record of %d bytes", limit, len(rec))
		}
		if len(got.Error) > MaxDeadErrorBytes || !strings.HasPrefix(long, got.Error) || len(got.Error)%2 != 0 || got.Reason != DeadExpired || len(got.Body) != 100 {
			t.Errorf("limit %d: error of %d bytes (cut mid-rune: %v), reason %v, body %d", limit, len(got.Error), len(got.Error)%2 != 0, got.Reason, len(got.Body))
		}
	}
}
