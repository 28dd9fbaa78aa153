package spillq

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"reflect"
	"testing"
	"time"

	"github.com/spillq/spillq/channel"
)

// keyStateV1 is st as a version 1 file, which had no timer mark, as
// older builds wrote it.
func keyStateV1(st channel.KeyState) []byte {
	b := encodeKeyState(keyFile{KeyState: st})
	b = append(b[:16:16], b[24:len(b)-4]...)
	b[4] = 1
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, keyCRC))
}

// FuzzDecodeKeyState: the key state decoder never panics, rejects what it
// cannot read with errBadKeyState, and what it accepts encodes back to the
// same bytes (a version 1 file to the same state, as version 2).
func FuzzDecodeKeyState(f *testing.F) {
	f.Add(encodeKeyState(keyFile{KeyState: channel.KeyState{Policy: channel.KeyUnique, Watermark: 7}}))
	replace := channel.KeyState{Policy: channel.KeyReplace, Watermark: 1 << 40, Entries: []channel.KeyEntry{
		{Key: "customer-1", ID: 99, Seq: 3},
		{Key: "k", ID: 1, Seq: 0},
	}}
	f.Add(encodeKeyState(keyFile{KeyState: replace, timerMark: 12}))
	f.Add(keyStateV1(replace))
	f.Add(encodeKeyState(keyFile{KeyState: channel.KeyState{Policy: channel.KeyDedup, Entries: []channel.KeyEntry{
		{Key: "req-1", ID: 5, Seq: 10, At: time.Unix(0, 1_700_000_000_000_000_000)},
	}}, timerMark: noTimerMark}))
	f.Add([]byte("SPKY"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := decodeKeyState(b)
		if err != nil {
			if !errors.Is(err, errBadKeyState) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		again := encodeKeyState(st)
		if b[4] == 1 {
			if st.timerMark != noTimerMark {
				t.Fatalf("version 1 file decoded with timer mark %d", st.timerMark)
			}
			if v1 := keyStateV1(st.KeyState); !bytes.Equal(v1, b) {
				t.Fatalf("version 1 re-encoding differs:\n got %x\nwant %x", v1, b)
			}
			if st2, err := decodeKeyState(again); err != nil || !reflect.DeepEqual(st2, st) {
				t.Fatalf("version 1 state re-encoded as version 2 decodes to %+v, %v; want %+v", st2, err, st)
			}
			return
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("re-encoding differs:\n got %x\nwant %x", again, b)
		}
	})
}
