package spillq

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"math"
	"os"

	"github.com/spillq/spillq/diskqueue"
)

// ListDeadLetters lists the dead letters f selects in the dead-letter
// store in dir (a queue's DIR/dead, a topic channel's
// DIR/channels/NAME/dead), oldest first, through a read-only view
// (diskqueue.OpenReadOnly): it takes no lock and changes nothing, so it
// runs beside the service that has the store open, in another process,
// and sees the letters stored up to the moment it begins. It is what
// `spillq dead list` prints.
//
// Damage does not stop it: a record that fails its checks is yielded as
// its error (wrapping diskqueue.ErrCorrupt), and one that is not a dead
// letter as an error wrapping [ErrNotDeadLetter] with the record's Seq in
// the DeadLetter; the listing goes on if the caller does. Any other error
// (dir is not a store, a read fails, ctx ends) is yielded last. Key and
// Body are the caller's.
func ListDeadLetters(ctx context.Context, dir string, f DeadFilter) iter.Seq2[DeadLetter, error] {
	return func(yield func(DeadLetter, error) bool) {
		// OpenReadOnly of a missing directory would say less.
		if _, err := os.Stat(dir); err != nil {
			yield(DeadLetter{}, fmt.Errorf("spillq: dead-letter store: %w", err))
			return
		}
		q, err := diskqueue.OpenReadOnly(dir, deadOptions(diskqueue.Options{}))
		if err != nil {
			yield(DeadLetter{}, fmt.Errorf("spillq: dead-letter store: %w", err))
			return
		}
		defer q.Close()
		for dl, err := range letters(ctx, q, 0, math.MaxUint64, f, true) {
			if !yield(dl, err) {
				return
			}
		}
	}
}

// letters decodes q's unacknowledged records with from <= seq < to as dead
// letters and yields those f selects, with their Seq. A record that does
// not decode is yielded as an error (ErrNotDeadLetter) and the loop goes
// on; one that fails its checks (diskqueue.ErrCorrupt) too if corrupt is
// set, else it is passed over (a store that owns q sets it aside when it
// reads past it). Any other error ends the loop.
func letters(ctx context.Context, q *diskqueue.Queue, from, to uint64, f DeadFilter, corrupt bool) iter.Seq2[DeadLetter, error] {
	return func(yield func(DeadLetter, error) bool) {
		for rec, err := range q.Unacknowledged(from, to) {
			if errors.Is(err, diskqueue.ErrCorrupt) {
				if corrupt && !yield(DeadLetter{}, err) {
					return
				}
				continue
			}
			if err == nil {
				err = ctx.Err()
			}
			if err != nil {
				yield(DeadLetter{}, fmt.Errorf("spillq: dead-letter store: %w", err))
				return
			}
			dl, derr := decodeDeadRecord(rec.Body)
			dl.Seq = rec.Seq
			if derr != nil {
				if !yield(dl, fmt.Errorf("seq %d: %w", rec.Seq, derr)) {
					return
				}
				continue
			}
			if f.Match(&dl) && !yield(dl, nil) {
				return
			}
		}
	}
}
