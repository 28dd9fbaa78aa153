package spillq

import (
	"context"
	"errors"
	"runtime"
	"testing"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// letterSeqs lists the seqs of d's letters of id.
func letterSeqs(t *testing.T, d *DeadLetters, id channel.ID) []uint64 {
	t.Helper()
	var seqs []uint64
	for dl, err := range d.List(context.Background(), DeadFilter{IDs: []channel.ID{id}}) {
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, dl.Seq)
	}
	return seqs
}

// TestDeadLetterAddOncePerID: Add of a message the store holds a letter
// of stores nothing, in the process that stored it and after a reopen
// (the IDs are read back from the store); once the letter is purged, the
// message's next dead-lettering is stored again.
func TestDeadLetterAddOncePerID(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	d, err := openDeadLetters(dir, diskqueue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	m := &channel.Message{ID: 7, Body: []byte("job")}
	for range 2 {
		if err := d.Add(m, channel.ErrFailed); err != nil {
			t.Fatal(err)
		}
	}
	if got := letterSeqs(t, d, 7); len(got) != 1 {
		t.Fatalf("two Adds of one message: letters at seqs %v, want one", got)
	}
	d.close()
	if d, err = openDeadLetters(dir, diskqueue.Options{}); err != nil {
		t.Fatal(err)
	}
	defer d.close()
	if err := d.Add(m, channel.ErrFailed); err != nil {
		t.Fatal(err)
	}
	if got := letterSeqs(t, d, 7); len(got) != 1 || d.Len() != 1 {
		t.Fatalf("an Add after a reopen of a message stored before it: letters at seqs %v (Len %d), want one", got, d.Len())
	}
	if n, err := d.Purge(ctx, DeadFilter{}); n != 1 || err != nil {
		t.Fatalf("Purge = %d, %v", n, err)
	}
	if err := d.Add(m, channel.ErrFailed); err != nil {
		t.Fatal(err)
	}
	if got := letterSeqs(t, d, 7); len(got) != 1 || got[0] != 1 {
		t.Fatalf("an Add after the purge of the message's letter: letters at seqs %v, want [1]", got)
	}
}

// TestDeadLetterRedrivenDeadAgainAtOnce: a redriven message that is
// dead-lettered again before Redrive acknowledges its old letter (the
// channel's consumer was quicker) is stored as a new letter: the old one
// is on its way out, and counting it would lose the message.
func TestDeadLetterRedrivenDeadAgainAtOnce(t *testing.T) {
	d, err := openDeadLetters(t.TempDir(), diskqueue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	if err := d.Add(&channel.Message{ID: 7, Body: []byte("job")}, channel.ErrFailed); err != nil {
		t.Fatal(err)
	}
	d.putBack = func(_ context.Context, msgs []*channel.Message) []error {
		for _, m := range msgs {
			if err := d.Add(m, channel.ErrFailed); err != nil {
				t.Fatal(err)
			}
		}
		return make([]error, len(msgs))
	}
	if n, err := d.Redrive(context.Background(), DeadFilter{}); n != 1 || err != nil {
		t.Fatalf("Redrive = %d, %v", n, err)
	}
	if got := letterSeqs(t, d, 7); len(got) != 1 || got[0] != 1 {
		t.Fatalf("letters of the message redriven and dead-lettered again: seqs %v, want [1] (the new one)", got)
	}
}

// TestDeadLetterRefusedRedriveStaysCounted: a letter its channel refuses
// stays in the store, and its ID with it: the message's next
// dead-lettering stores nothing.
func TestDeadLetterRefusedRedriveStaysCounted(t *testing.T) {
	d, err := openDeadLetters(t.TempDir(), diskqueue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	m := &channel.Message{ID: 7, Body: []byte("job")}
	if err := d.Add(m, channel.ErrFailed); err != nil {
		t.Fatal(err)
	}
	d.putBack = func(_ context.Context, msgs []*channel.Message) []error {
		return []error{channel.ErrDuplicate}
	}
	if _, err := d.Redrive(context.Background(), DeadFilter{}); !errors.Is(err, channel.ErrDuplicate) {
		t.Fatalf("Redrive: %v, want ErrDuplicate", err)
	}
	if err := d.Add(m, channel.ErrFailed); err != nil {
		t.Fatal(err)
	}
	if got := letterSeqs(t, d, 7); len(got) != 1 {
		t.Fatalf("letters at seqs %v, want the one the channel refused", got)
	}
}

// TestDeadIDsMemory measures what the IDs cost per letter, for the figure
// DeadLetters' doc gives.
func TestDeadIDsMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates a million IDs")
	}
	const n = 1 << 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	s := newDeadIDs()
	for i := range n {
		s.add(channel.ID(i) * 0x9e3779b97f4a7c15)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%.1f bytes per letter's ID", per)
	if per > 64 {
		t.Fatalf("%.1f bytes per ID: more than the 20 to 40 DeadLetters' doc says", per)
	}
	runtime.KeepAlive(s)
}

// TestDeadLetterRedrivenWhileBeingAdded: a Redrive that reads a letter
// while its Add is still under way (stored, its fsync not yet done) puts
// it back and acknowledges it; the message's next dead-lettering must be
// stored. Counted only once its Add returned, the letter stayed counted
// after it left, the next Add stored nothing and the channel dropped the
// message (TestDeadLetterSIGKILL found it so).
func TestDeadLetterRedrivenWhileBeingAdded(t *testing.T) {
	d, err := openDeadLetters(t.TempDir(), diskqueue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.close()
	m := &channel.Message{ID: 7, Body: []byte("job")}
	d.putBack = func(_ context.Context, msgs []*channel.Message) []error { return make([]error, len(msgs)) }
	// Add, cut in two around the Redrive.
	if !d.ids.begin(m.ID) {
		t.Fatal("begin: the empty store holds the message")
	}
	err = d.add(m, channel.ErrFailed)
	if n, rerr := d.Redrive(context.Background(), DeadFilter{}); n != 1 || rerr != nil {
		t.Fatalf("Redrive = %d, %v", n, rerr)
	}
	d.ids.end(m.ID, err == nil)
	if err := d.Add(m, channel.ErrFailed); err != nil {
		t.Fatal(err)
	}
	if got := letterSeqs(t, d, 7); len(got) != 1 || got[0] != 1 {
		t.Fatalf("the redriven message dead-lettered again: letters at seqs %v, want [1]", got)
	}
}

// BenchmarkOpenDeadLetters is the open of a store of 100,000 letters
// (200-byte bodies), which reads every letter's ID back.
func BenchmarkOpenDeadLetters(b *testing.B) {
	dir := b.TempDir()
	d, err := openDeadLetters(dir, diskqueue.Options{})
	if err != nil {
		b.Fatal(err)
	}
	body := make([]byte, 200)
	for i := range 100_000 {
		rec := appendDeadRecord(nil, &DeadLetter{ID: channel.ID(i + 1), Body: body, Reason: DeadFailed, Error: "channel: message failed"}, 0)
		if err := d.store.q.Put(context.Background(), rec); err != nil {
			b.Fatal(err)
		}
	}
	d.close()
	b.ResetTimer()
	for b.Loop() {
		d, err := openDeadLetters(dir, diskqueue.Options{})
		if err != nil {
			b.Fatal(err)
		}
		d.close()
	}
}
