package spillq

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"path/filepath"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/internal/vfs"
)

// DeliveriesDir is the subdirectory of a queue's directory (and of a
// topic's channel's timer store) that holds its delivery journal: a disk
// queue of 12-byte records, one per delivery, that keeps a message's
// attempts across a crash (see channel.Options.Deliveries; FORMAT.md,
// "Delivery journal").
const DeliveriesDir = "deliveries"

// maxJournalSegmentBytes caps the journal's segments: a message in flight
// for long keeps its segment, and the records are small.
const maxJournalSegmentBytes = 1 << 20

// journalOptions derives the journal's options from the timer store's
// (no BlockWhenFull, retention or hold). It syncs on the interval alone,
// never per record, not even under SyncEvery 1: what a power cut takes
// from it is counts, not messages (a message then gets deliveries past
// MaxAttempts), and a write per delivery must not wait for the disk.
func journalOptions(t diskqueue.Options) diskqueue.Options {
	j := t
	j.MaxSegmentBytes = min(j.MaxSegmentBytes, maxJournalSegmentBytes) // timerOptions set it
	j.SyncEvery = math.MaxInt
	j.MinRecordBytes, j.MaxRecordBytes = 0, 0
	j.Compress, j.HoldAtOpen = false, false
	return j
}

// openDeliveries opens the delivery journal in dir's DeliveriesDir for a
// channel with maxAttempts, or nil: a channel without MaxAttempts gets one
// only if a former run left the directory (whose entries it then reads;
// see channel.Options.Deliveries), so none is made for it.
func openDeliveries(dir string, topts diskqueue.Options, maxAttempts uint16) (*diskqueue.Queue, error) {
	jdir := filepath.Join(dir, DeliveriesDir)
	if maxAttempts == 0 {
		if _, err := vfs.Or(topts.FS).Stat(jdir); errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
	}
	jq, err := diskqueue.Open(jdir, journalOptions(topts))
	if err != nil {
		return nil, fmt.Errorf("spillq: delivery journal: %w", err)
	}
	return jq, nil
}

// deliveries is jq as the channel's journal, the zero Store for none.
func deliveries(jq *diskqueue.Queue) channel.Store {
	if jq == nil {
		return channel.Store{}
	}
	return DiskBackend(jq)
}

// closeQueue closes q if there is one.
func closeQueue(q *diskqueue.Queue) {
	if q != nil {
		q.Close()
	}
}
