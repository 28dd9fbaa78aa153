package spillq_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spillq/spillq"
)

// TestJournalGracefulRestart: through Open with MaxAttempts, a Close
// spends no attempt of the message it cuts short, the journal is empty
// once nothing is in flight, and a queue without MaxAttempts makes none.
func TestJournalGracefulRestart(t *testing.T) {
	dir := t.TempDir()
	opts := spillq.Options{MaxAttempts: 5, MsgTimeout: time.Hour}
	q, err := spillq.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	q.Put(context.Background(), []byte("a"))
	for range 2 {
		m := receiveQ(t, q)
		if m.Attempts != 1 {
			t.Fatalf("after a graceful restart: %d attempts, want 1", m.Attempts)
		}
		q.Close()
		if q, err = spillq.Open(dir, opts); err != nil {
			t.Fatal(err)
		}
	}
	m := receiveQ(t, q)
	m.Requeue(0)
	if m = receiveQ(t, q); m.Attempts != 2 {
		t.Fatalf("requeued: %d attempts, want 2", m.Attempts)
	}
	m.Finish()
	q.Close()
	if n := depthOf(t, filepath.Join(dir, spillq.DeliveriesDir)); n != 0 {
		t.Fatalf("journal holds %d records with nothing in flight", n)
	}

	plain := t.TempDir()
	q, err = spillq.Open(plain, spillq.Options{})
	if err != nil {
		t.Fatal(err)
	}
	q.Put(context.Background(), []byte("a"))
	receiveQ(t, q)
	q.Close()
	if _, err := os.Stat(filepath.Join(plain, spillq.DeliveriesDir)); !os.IsNotExist(err) {
		t.Fatalf("a queue without MaxAttempts made %s: %v", spillq.DeliveriesDir, err)
	}
}
