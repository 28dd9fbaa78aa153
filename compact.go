package spillq

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// DefaultCompactDirtyRatio is Options.CompactDirtyRatio's default, Kafka's
// min.cleanable.dirty.ratio.
const DefaultCompactDirtyRatio = 0.5

// CompactStats is what [Queue.Compact] did or, from [Queue.CompactStats],
// what every compaction since Open did.
type CompactStats struct {
	Runs     int64 // compactions (CompactStats only; Compact's is 1)
	Segments int64 // sealed segments rewritten
	Removed  int64 // records removed from them
	// LogBytesBefore and LogBytesAfter are those segments' log bytes
	// before and after: the difference is the space compaction gave back.
	LogBytesBefore, LogBytesAfter int64
	// Last is when the last compaction ended (CompactStats only), and Err
	// the error it returned, if any.
	Last time.Time
	Err  error
}

// compactor compacts a queue's log, on demand (Queue.Compact) and in the
// background once the log's dirty ratio reaches the option's.
type compactor struct {
	dq      compactLog
	replace bool    // the policy is KeyReplace
	ratio   float64 // <0: no automatic compaction
	logger  *slog.Logger
	// compacted tells a queue's channel of a pending version removed that
	// its cursor had not handed out (nextRead says which those are):
	// Channel.Compacted. Both nil for a topic, whose channels learn it
	// from the topic's key state.
	compacted func(seq uint64, key []byte, id channel.ID, deferred bool)
	nextRead  func() uint64

	// slot is held by the compaction running, Compact's or the
	// background's: one at a time per log (the log's own Compact takes
	// one segment at a time). It guards sawKeys.
	slot chan struct{}
	// cleanEnd is the seq the last compaction looked at the records up
	// to: segments from it on are dirty, new since. Atomic, so that
	// dirty (the keeper's every second) never waits behind a compaction.
	cleanEnd atomic.Uint64
	// sawKeys is set once a compaction has found a keyed record: until
	// then each reads only the records new since the last.
	sawKeys bool

	statsMu sync.Mutex
	total   CompactStats

	ctx     context.Context
	cancel  context.CancelFunc
	running sync.WaitGroup
}

// compactLog is the log a compactor compacts: a queue's, whose
// Acknowledged is its own cursor's, or a topic's, every channel's.
type compactLog interface {
	Segments() []diskqueue.SegmentInfo
	Stats() diskqueue.Stats
	NextSeq() uint64
	Sync(ctx context.Context) error
	Scan(from, to uint64) iter.Seq2[diskqueue.Record, error]
	Acknowledged(seq uint64) bool
	Compact(ctx context.Context, base uint64, keep func(rec diskqueue.Record) bool) (diskqueue.CompactStats, error)
}

// checkDirtyRatio refuses a CompactDirtyRatio no log can reach.
func checkDirtyRatio(r float64) error {
	if math.IsNaN(r) {
		return fmt.Errorf("spillq: %w: CompactDirtyRatio is NaN", diskqueue.ErrInvalidOptions)
	}
	if r > 1 {
		return fmt.Errorf("spillq: %w: CompactDirtyRatio %v is above 1, which no log reaches, so nothing would ever compact (a negative ratio turns automatic compaction off)", diskqueue.ErrInvalidOptions, r)
	}
	return nil
}

// newCompactor returns the compactor of a log whose records compaction
// can remove, or nil: under KeyReplace (replace) the versions a newer one
// superseded, and with retention (disk.RetainBytes, disk.RetainAge) the
// acknowledged records of a key a newer record has replaced.
func newCompactor(dq compactLog, replace bool, disk diskqueue.Options, ratio float64, logger *slog.Logger) *compactor {
	if !replace && disk.RetainBytes == 0 && disk.RetainAge == 0 {
		return nil
	}
	if ratio == 0 {
		ratio = DefaultCompactDirtyRatio
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &compactor{dq: dq, replace: replace, ratio: ratio, logger: logger, ctx: ctx, cancel: cancel, slot: make(chan struct{}, 1)}
}

// dirty reports whether the log is due a compaction: at least two sealed
// segments, and the sealed log bytes from cleanEnd on at least ratio of
// all sealed log bytes.
func (c *compactor) dirty() bool {
	clean := c.cleanEnd.Load()
	var sealed, total, dirty int64
	for _, s := range c.dq.Segments() {
		if !s.Sealed {
			continue
		}
		sealed++
		total += s.Bytes
		if s.Base >= clean {
			dirty += s.Bytes
		}
	}
	return sealed >= 2 && total > 0 && float64(dirty) >= c.ratio*float64(total)
}

// maybeStart starts a background compaction if the log is due one and
// none is running.
func (c *compactor) maybeStart() {
	if c.ratio < 0 || c.ctx.Err() != nil || !c.dirty() {
		return
	}
	select {
	case c.slot <- struct{}{}:
	default:
		return // one is running; the next look finds what it left
	}
	c.running.Add(1)
	go func() {
		defer c.running.Done()
		if _, err := c.compactHolding(c.ctx); err != nil && c.ctx.Err() == nil {
			c.logger.Warn("spillq: compaction failed; it is tried again once more of the log is new", "err", err)
		}
	}()
}

// stop ends a background compaction and waits for it.
func (c *compactor) stop() {
	c.cancel()
	c.running.Wait()
}

// stats is what every compaction did; nil (no compaction) did nothing.
func (c *compactor) stats() CompactStats {
	if c == nil {
		return CompactStats{}
	}
	c.statsMu.Lock()
	defer c.statsMu.Unlock()
	return c.total
}

// removedVersion is a pending KeyReplace version a compaction removed.
type removedVersion struct {
	key      []byte
	id       channel.ID
	seq      uint64
	deferred bool
}

// compact rewrites the sealed segments without the records no consumer
// will need. It first finds the newest version of each key among the
// records put so far, and makes those records durable (Sync): a record is
// removed only for a newer one with its key that a power cut cannot take
// away. Versions compare by message ID, which grows with every Put, not
// by seq: Close stores again what it held, so an older version can sit at
// a higher seq.
//
// A nil compactor (a log compaction can remove nothing from) does nothing.
func (c *compactor) compact(ctx context.Context) (CompactStats, error) {
	if c == nil {
		return CompactStats{Runs: 1}, nil
	}
	select {
	case c.slot <- struct{}{}:
	case <-ctx.Done():
		return CompactStats{}, fmt.Errorf("spillq: compact: waiting for the compaction running: %w", ctx.Err())
	}
	return c.compactHolding(ctx)
}

// compactHolding is compact for the holder of the slot, which it gives
// back.
func (c *compactor) compactHolding(ctx context.Context) (CompactStats, error) {
	defer func() { <-c.slot }()
	st := CompactStats{Runs: 1}
	err := c.compactLocked(ctx, &st)
	st.Last, st.Err = time.Now(), err
	c.statsMu.Lock()
	c.total.Runs++
	c.total.Segments += st.Segments
	c.total.Removed += st.Removed
	c.total.LogBytesBefore += st.LogBytesBefore
	c.total.LogBytesAfter += st.LogBytesAfter
	c.total.Last, c.total.Err = st.Last, err
	c.statsMu.Unlock()
	return st, err
}

func (c *compactor) compactLocked(ctx context.Context, st *CompactStats) error {
	if len(c.dq.Segments()) < 2 {
		return nil // the active segment alone: nothing sealed
	}
	end := c.dq.NextSeq()
	if err := c.dq.Sync(ctx); err != nil {
		return fmt.Errorf("spillq: compact: sync the log: %w", err)
	}
	// Listed after the Sync, whose round seals the segments rotated out
	// before it: listed before, those were not sealed yet and were passed
	// over, so a Compact right after a burst of Puts removed next to
	// nothing.
	segs := c.dq.Segments()
	// A log that never held a keyed record (retention alone) is not read
	// through each time: only what is new since the last look, which is
	// then every keyed record there is.
	var from uint64
	if !c.sawKeys {
		from = c.cleanEnd.Load()
	}
	newest, superseding, keyed, err := c.newestVersions(ctx, from, end)
	if err != nil {
		return err
	}
	c.cleanEnd.Store(end)
	c.sawKeys = c.sawKeys || keyed > 0
	if superseding == 0 {
		return nil // no key has two versions: nothing to remove
	}
	var first error
	for _, seg := range segs {
		if !seg.Sealed {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		var gone []removedVersion
		keep := func(rec diskqueue.Record) bool {
			key, mid, ok := channel.RecordKey(rec.Body)
			if !ok {
				return true
			}
			if id, ok := newest[string(key)]; !ok || id <= mid {
				return true
			}
			acked := c.dq.Acknowledged(rec.Seq)
			if !c.replace {
				return !acked // only history: pending work stays
			}
			if !acked && c.compacted != nil {
				gone = append(gone, removedVersion{key: append([]byte(nil), key...), id: mid, seq: rec.Seq, deferred: channel.RecordDeferred(rec.Body)})
			}
			return false
		}
		cs, err := c.dq.Compact(ctx, seg.Base, keep)
		switch {
		case errors.Is(err, diskqueue.ErrNotFound):
			continue // deleted meanwhile: nothing left to compact
		case err != nil:
			if first == nil {
				first = fmt.Errorf("spillq: compact segment %d: %w", seg.Base, err)
			}
			continue
		}
		// Removed now: those the cursor had not handed out the channel
		// will never see, so they are done. Those it had (read ahead, in
		// flight, requeued, deferred) are the channel's still, which drops
		// them as superseded when it takes them, or lets one in flight
		// finish.
		if c.compacted != nil && len(gone) > 0 {
			from := c.nextRead()
			for _, v := range gone {
				if v.seq >= from {
					c.compacted(v.seq, v.key, v.id, v.deferred)
				}
			}
		}
		if cs.Removed > 0 {
			st.Segments++
			st.Removed += cs.Removed
			st.LogBytesBefore += cs.LogBytesBefore
			st.LogBytesAfter += cs.LogBytesAfter
		}
	}
	return first
}

// newestVersions returns the newest message ID of each key among the
// records from from (or the first still on disk) below end, how many
// records a newer one with their key supersedes, and how many have a key.
// Its memory is one entry per key. Segments that retention deletes
// meanwhile are passed over: what they held was acknowledged.
func (c *compactor) newestVersions(ctx context.Context, from, end uint64) (newest map[string]channel.ID, superseding, keyed int, err error) {
	newest = map[string]channel.ID{}
	from = max(from, c.dq.Stats().FirstSeq)
	for from < end {
		next := from
		var failed error
		for rec, err := range c.dq.Scan(from, end) {
			if errors.Is(err, diskqueue.ErrCorrupt) {
				continue // never delivered: supersedes nothing
			}
			if err != nil {
				failed = err
				break
			}
			if err := ctx.Err(); err != nil {
				return nil, 0, 0, err
			}
			next = rec.Seq + 1
			key, mid, ok := channel.RecordKey(rec.Body)
			if !ok {
				continue
			}
			keyed++
			id, ok := newest[string(key)]
			if ok && id != mid { // the same message stored again at Close supersedes nothing
				superseding++
			}
			if !ok || mid > id {
				newest[string(key)] = mid
			}
		}
		switch {
		case failed == nil:
			return newest, superseding, keyed, nil
		case errors.Is(failed, diskqueue.ErrNotFound) && c.dq.Stats().FirstSeq > next:
			from = c.dq.Stats().FirstSeq // deleted under the scan
		default:
			return nil, 0, 0, fmt.Errorf("spillq: compact: read the log: %w", failed)
		}
	}
	return newest, superseding, keyed, nil
}

// Compact rewrites the queue's sealed segments without the records no
// consumer will need: under channel.KeyReplace, every version of a key
// that a newer one superseded (it would be acknowledged unseen), pending
// or not; with retention (Disk.RetainBytes, Disk.RetainAge), under any
// policy, the acknowledged records of a key that a newer record replaced,
// so the history kept holds the newest of each key (Kafka's compacted
// topic). Records without a key, and the newest record of each key, stay.
// Under other options it removes nothing.
//
// The queue compacts by itself once the log is dirty enough
// (Options.CompactDirtyRatio); Compact runs one now, after any running
// one (if ctx ends while it waits for that, it returns ctx's error, having
// done nothing). It reads the log through once to find each key's newest version
// (memory: one map entry per key), fsyncs the log, then rewrites each
// sealed segment that holds a removable record, beside Puts and
// deliveries: see [diskqueue.Log.Compact] (each segment is swapped
// crash-safely, and a lookup of a removed record returns
// diskqueue.ErrCompacted). A segment it cannot compact (damaged, say) is
// skipped; the first such error is returned with what it did. After
// Close it returns [channel.ErrClosed].
func (q *Queue) Compact(ctx context.Context) (CompactStats, error) {
	if q.backend.closed.Load() {
		return CompactStats{}, channel.ErrClosed
	}
	return q.comp.compact(ctx)
}

// CompactStats returns what every compaction since Open did, from memory.
func (q *Queue) CompactStats() CompactStats { return q.comp.stats() }

// Compact compacts the topic's log now, as [Queue.Compact] does a
// queue's: under KeyReplace every version a newer one superseded goes
// (each channel would drop it), and with retention the finished versions
// a newer one replaced; otherwise nothing. After Close it returns
// [channel.ErrClosed].
func (t *Topic) Compact(ctx context.Context) (CompactStats, error) {
	t.opMu.Lock()
	closed := t.closed
	t.opMu.Unlock()
	if closed {
		return CompactStats{}, channel.ErrClosed
	}
	return t.comp.compact(ctx)
}

// CompactStats returns what every compaction of the topic's log since
// OpenTopic did.
func (t *Topic) CompactStats() CompactStats { return t.comp.stats() }
