package spillq

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/spillq/spillq/channel"
)

// FuzzDecodeKeyState: the key state decoder never panics, rejects what it
// cannot read with errBadKeyState, and what it accepts encodes back to the
// same bytes.
func FuzzDecodeKeyState(f *testing.F) {
	f.Add(encodeKeyState(channel.KeyState{Policy: channel.KeyUnique, Watermark: 7}))
	f.Add(encodeKeyState(channel.KeyState{Policy: channel.KeyReplace, Watermark: 1 << 40, Entries: []channel.KeyEntry{
		{Key: "customer-1", ID: 99, Seq: 3},
		{Key: "k", ID: 1, Seq: 0},
	}}))
	f.Add(encodeKeyState(channel.KeyState{Policy: channel.KeyDedup, Entries: []channel.KeyEntry{
		{Key: "req-1", ID: 5, Seq: 10, At: time.Unix(0, 1_700_000_000_000_000_000)},
	}}))
	f.Add([]byte("SPKY"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := decodeKeyState(b)
		if err != nil {
			if !errors.Is(err, errBadKeyState) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		if again := encodeKeyState(st); !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n got %x\nwant %x", again, b)
		}
	})
}
