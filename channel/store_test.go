package channel_test

import (
	"errors"
	"testing"

	"github.com/spillq/spillq/channel"
)

// TestStoreCapabilities: New refuses, with ErrInvalidOptions, the options
// a store cannot carry, learning it without a write (the store is left as
// it was), and takes the rest over the same store.
func TestStoreCapabilities(t *testing.T) {
	plain := func() channel.Store { return unnumbered{newMemStore()}.store() }
	for _, tc := range []struct {
		name string
		opts channel.Options
	}{
		{"KeyUnique", channel.Options{Backend: plain(), Keys: channel.KeyUnique}},
		{"KeyReplace", channel.Options{Backend: plain(), Keys: channel.KeyReplace}},
		{"KeyDedup", channel.Options{Backend: plain(), Keys: channel.KeyDedup}},
		{"Deliveries over it", channel.Options{Backend: plain(), Deliveries: newMemStore().store(), MaxAttempts: 3}},
		{"as Deliveries", channel.Options{Backend: newMemStore().store(), Deliveries: plain()}},
		{"as Timers", channel.Options{Backend: newMemStore().store(), Timers: plain()}},
		{"a Log without a Cursor", channel.Options{Backend: channel.Store{Log: newMemStore().log}}},
		{"Timers without a Cursor", channel.Options{Backend: newMemStore().store(), Timers: channel.Store{Log: newMemStore().log}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := channel.New(tc.opts)
			if !errors.Is(err, channel.ErrInvalidOptions) {
				if c != nil {
					c.Close()
				}
				t.Fatalf("New: %v, want ErrInvalidOptions", err)
			}
		})
	}
	b := unnumbered{newMemStore()}
	for _, keys := range []channel.KeyPolicy{channel.KeyNone, channel.KeySerial} {
		c, err := channel.New(channel.Options{Backend: b.store(), Keys: keys, Timers: newMemStore().store()})
		if err != nil {
			t.Fatalf("Keys %v, with a timer store of its own: %v", keys, err)
		}
		put(t, c, "m")
		receive(t, c).Finish()
		c.Close()
		b = unnumbered{b.reopen()}
	}
	if n := b.written(); n != 2 {
		t.Fatalf("the store holds %d records, want the 2 put: a look at what it can do wrote", n)
	}
}

// TestFanoutStoreCapabilities: NewFanout refuses a key policy over a log
// that does not number its records.
func TestFanoutStoreCapabilities(t *testing.T) {
	s := unnumbered{newMemStore()}.store()
	if _, err := channel.NewFanout(s.Log, channel.FanoutOptions{Keys: channel.KeyUnique}); !errors.Is(err, channel.ErrInvalidOptions) {
		t.Fatalf("NewFanout(KeyUnique) over an unnumbered log: %v, want ErrInvalidOptions", err)
	}
	f, err := channel.NewFanout(s.Log, channel.FanoutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
}
