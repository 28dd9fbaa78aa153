//go:build unix

package spillq_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/spillq/spillq/internal/modetest"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

func wantSeen(t *testing.T, seen []string, names ...string) {
	t.Helper()
	for _, n := range names {
		if !slices.Contains(seen, n) {
			t.Errorf("no %s among the files checked: %v", n, seen)
		}
	}
}

var modeCases = []struct {
	mode      fs.FileMode // Disk.FileMode
	file, dir fs.FileMode
}{
	{0, 0o600, 0o700},
	{0o640, 0o640, 0o750},
}

// TestQueueFileModes checks the modes of everything a queue with a key
// policy and a deferred message makes (the log, the timer store, the key
// state, written anew at each store) under a umask that takes nothing
// away.
func TestQueueFileModes(t *testing.T) {
	modetest.ZeroUmask(t)
	for _, c := range modeCases {
		t.Run(c.file.String(), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "q")
			opts := spillq.Options{Keys: channel.KeyDedup, Disk: diskqueue.Options{FileMode: c.mode}}
			for round := range 2 {
				q, err := spillq.Open(dir, opts)
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				if err := q.PutWith(ctx, []byte("now"), channel.PutOptions{Key: []byte{'a', byte(round)}}); err != nil {
					t.Fatal(err)
				}
				if err := q.PutWith(ctx, []byte("later"), channel.PutOptions{Key: []byte{'b', byte(round)}, Delay: time.Hour}); err != nil {
					t.Fatal(err)
				}
				if err := q.Close(); err != nil {
					t.Fatal(err)
				}
				if round == 0 {
					// A key state stored before the default was 0600 is
					// stored anew with the queue's mode.
					if err := os.Chmod(filepath.Join(dir, spillq.KeysDir, "state"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			seen := modetest.Check(t, dir, c.file, c.dir)
			wantSeen(t, seen, "cursor", "LOCK", "keys", "keys/state", "timers", "timers/cursor", "timers/00000000000000000000.log")
		})
	}
}

// TestTopicFileModes is TestQueueFileModes for a topic: its log, its
// channels' cursors and timer stores, its key state.
func TestTopicFileModes(t *testing.T) {
	modetest.ZeroUmask(t)
	for _, c := range modeCases {
		t.Run(c.file.String(), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "t")
			tp, err := spillq.OpenTopic(dir, spillq.TopicOptions{Keys: channel.KeyUnique, Disk: diskqueue.Options{FileMode: c.mode}})
			if err != nil {
				t.Fatal(err)
			}
			ch, err := tp.Channel("a", spillq.ChannelOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := tp.PutWith(context.Background(), []byte("x"), channel.PutOptions{Key: []byte("k")}); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			m, err := ch.Receive(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Requeue(time.Hour); err != nil { // to the channel's timer store
				t.Fatal(err)
			}
			if err := tp.Close(); err != nil {
				t.Fatal(err)
			}
			seen := modetest.Check(t, dir, c.file, c.dir)
			wantSeen(t, seen, "LOCK", "keys/state", "cursors/a/cursor", "channels", "channels/a", "channels/a/cursor", "channels/a/00000000000000000000.log")
		})
	}
}

// TestFileModeInvalidMakesNothing: a FileMode the log refuses is refused
// by Open and OpenTopic before either makes a directory.
func TestFileModeInvalidMakesNothing(t *testing.T) {
	disk := diskqueue.Options{FileMode: 0o700}
	dir := filepath.Join(t.TempDir(), "q")
	if _, err := spillq.Open(dir, spillq.Options{Disk: disk}); !errors.Is(err, diskqueue.ErrInvalidOptions) {
		t.Fatalf("Open: %v, want ErrInvalidOptions", err)
	}
	if _, err := spillq.OpenTopic(dir, spillq.TopicOptions{Disk: disk}); !errors.Is(err, diskqueue.ErrInvalidOptions) {
		t.Fatalf("OpenTopic: %v, want ErrInvalidOptions", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a directory was made: %v", err)
	}
}
