package channel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/internal/histogram"
)

// Channel is an NSQ-style channel: a bounded memory buffer that spills to
// a Backend, with acknowledged, at-least-once delivery. It is safe for
// concurrent use by any number of producers and consumers.
type Channel struct {
	opts Options
	// backend is the Log of Options.Backend; nil: memory only, or a
	// topic's channel. numbered says it numbers its records (see Log).
	backend  Log
	numbered bool
	// disk is the backend when it is a diskqueue.Log, which Puts hand the
	// envelope's header apart from the body (putDisk); nil otherwise.
	disk *diskqueue.Log
	// src is where the pump reads: the backend's Cursor, or a topic's
	// channel's cursor over the topic's log. Nil: memory only.
	src Cursor
	// fan is the topic this channel belongs to (it puts, the channel only
	// reads); nil for a channel of its own.
	fan *Fanout
	log *slog.Logger

	memCh chan *Message // the memory buffer; nil with a Backend and MemQueueSize 0

	closeCh   chan struct{}   // closed by Close
	closeDone chan struct{}   // closed when Close has finished
	closeCtx  context.Context // cancelled by Close, for blocking backend calls
	cancel    context.CancelFunc
	clockWake chan struct{} // capacity 1: the deferred heap changed
	wg        sync.WaitGroup

	isClosed atomic.Bool

	// minBody and maxBody bound the bodies the backend can store in an
	// envelope; 0 and math.MaxInt when it states no limits. Set by New,
	// read-only after.
	minBody, maxBody int

	// diskPending counts messages stored in the backend and not yet handed
	// to a consumer (or to the deferred heap). While it is above zero, Put
	// sends new messages to the backend too, so they stay behind the older
	// ones there: that is what keeps put order across the spill.
	diskPending atomic.Int64
	// readThrough is, for a topic's channel, the seq after the last record
	// the pump has read and passed on: the topic's log holds
	// NextSeq-readThrough records this channel has not read yet (see
	// Channel.backlogged). A topic's channel leaves diskPending at zero.
	readThrough atomic.Uint64
	// keys is the key policy's state; nil under KeyNone.
	keys *keyTable
	// namesRecords is set under a key policy that keeps state (KeyUnique,
	// KeyReplace, KeyDedup) over a backend: its state names records by
	// the backend's seqs.
	namesRecords bool
	// passesSeen (under passMu) is the count of the backend's Passed
	// already taken off diskPending: by the pump, or set past by Empty,
	// which counts everything off. One lock over both, so that no count
	// the pump took before an Empty comes off the records put after it.
	// Only a channel with a backend counts passes.
	passMu     sync.Mutex
	passesSeen int64
	// passesLooked is the count at the last reader's look (under
	// reader.mu): unchanged, there is nothing to take off, and no lock
	// to take.
	passesLooked int64
	// diskDeferred counts those of diskPending that are deferred messages,
	// for Stats.
	diskDeferred diskDeferred
	// gen is bumped by Empty; a message handed over with an older gen was
	// discarded and is dropped on receipt.
	gen atomic.Uint32
	// emptiedBelow is, over a backend that numbers its records, the
	// backend's NextSeq at the last Empty: every record below it was discarded. The pump loads gen
	// after its read, so a record read just before an Empty can get the
	// new gen; its seq tells it apart (pump).
	emptiedBelow atomic.Uint64

	// flights are the messages in flight, in shards with their own locks
	// (see flightList).
	flights [flightShards]flightList

	// ahead is the read-ahead of backend records; its chans are nil
	// without a Cursor. reader is the state of reading the backend into
	// it (pump.go), nil without a Cursor.
	ahead  readAhead
	reader *backendReader

	// mu guards the fields below, and every message's state while it is
	// ready or deferred.
	mu sync.Mutex
	// ready is delivered before the memory buffer (see readyList).
	ready    readyList
	deferred deferHeap // whole messages: without a timer store, or where it failed
	// collected is set by Close once it has taken ready and deferred:
	// nothing added to them after is stored.
	collected bool
	// timers is the view of Options.Timers; nil without one.
	timers *timerSet
	// held keeps a topic's channel's receivers to what its timer store
	// held at New until that is ready (see heldGate).
	held         heldGate
	messagesOnce sync.Once
	messagesCh   chan *Message

	started time.Time // when New ran; message stamps count from it

	// now is a coarse clock (Unix ns at New plus the monotonic time since,
	// so it never steps back) that only moves forward: the clock goroutine
	// advances it on every scan, Touch to the present. In-flight deadlines
	// use it, since timeouts are only found on those scans anyway, which
	// saves a clock read per delivery. Each deadline is now+MsgTimeout
	// with now read under the message's shard lock, so a shard's list,
	// appended to in lock order, stays sorted by deadline.
	// BenchmarkBacklog/backlog=0 justifies it: a clock read per delivery
	// costs 15% more per message.
	now atomic.Int64
	// pause is Pause's state, read on the receive path.
	pause pauseGate

	prod    producerCounters // written by every Put, on cache lines of its own
	cons    consumerCounters
	takers  takers
	latency histogram.Histogram
	moves   moveQueue

	// jrn is the view of Options.Deliveries; nil without one. jBacklog
	// is the reader's (under reader.mu): the entries New read for records
	// of the Cursor, by seq (journalBacklog).
	jrn      *journal
	jBacklog []journalEntry

	// takeWaitsForTesting, when set (by a test, before any receiver),
	// runs in take after its looks at the sources and before it waits on
	// them, so that a test can make several ready for the same wait.
	takeWaitsForTesting func()
}

// producerCounters is what every Put writes (putMu, nextID). The pads
// keep it off the cache lines of the fields around it, which consumers use
// on every message, so the producer's core and the consumers' do not keep
// taking one line from each other. BenchmarkPipeline/work=0 justifies
// them: without them it runs 7% slower.
type producerCounters struct {
	_ [64]byte
	// putMu is held shared by every Put while it hands a message over, so
	// Close can wait for Puts in progress before it flushes memory.
	putMu sync.RWMutex
	// nextID counts Puts too: puts = nextID - firstID - putFailures, which
	// saves the hot path an atomic add.
	nextID      atomic.Uint64
	firstID     uint64
	putFailures atomic.Int64
	spills      atomic.Int64
	_           [64]byte
}

type consumerCounters struct {
	requeues, timeouts, finishes     atomic.Int64
	deadLetters, expired, badRecords atomic.Int64
	// releases counts Release; failed counts Fail; deadLetterErrors
	// counts the dead-letter handler's refusals (deadLetterFailed).
	releases, failed, deadLetterErrors atomic.Int64
	// superseded counts, on a topic's channel, the messages the topic's
	// KeyReplace had superseded when the channel took them.
	superseded atomic.Int64
	// readErrors counts the backend reads that failed; readErr is the
	// last one's error while reads fail, nil once one succeeds (pump).
	readErrors atomic.Int64
	readErr    atomic.Pointer[error]
	// lastTimed (Unix ns) and lastLatency (ns) are the last finish whose
	// latency was timed; see recordLatency.
	lastTimed   atomic.Int64
	lastLatency atomic.Int64
}

// New makes a channel. With opts.Backend set, the channel takes ownership
// of it and picks up the records already stored there (a restart).
func New(opts Options) (*Channel, error) {
	set, err := checkStore("Backend", opts.Backend)
	if err != nil || !set {
		return newChannel(opts, nil, nil, err)
	}
	return newChannel(opts, opts.Backend.Cursor, nil, nil)
}

// Check returns the error [New] would return for o's own values (an
// [ErrInvalidOptions]), without making a channel: a caller that makes
// durable state for one (a queue's directory) makes it only for options New
// takes. It does not look into the stores (o.Backend, o.Timers,
// o.Deliveries).
func (o Options) Check() error {
	_, err := checkOptions(o, false)
	return err
}

// checkOptions is opts with its defaults, or why New (member false) or
// Fanout.Join (member true) refuses it.
func checkOptions(opts Options, member bool) (Options, error) {
	o, err := opts.withDefaults()
	if err != nil {
		return o, err
	}
	if member && o.Keys != KeyNone && o.Keys != KeySerial {
		return o, fmt.Errorf("%w: Keys %v on a topic's channel: it decides at Put, which is the topic's; a topic's channel takes KeyNone or KeySerial", ErrInvalidOptions, o.Keys)
	}
	return o, nil
}

// newChannel makes a channel reading src: opts.Backend's Cursor for a
// channel of its own, a cursor over fan's log for a topic's channel. A
// storeErr (New's look at opts.Backend) is returned as it is.
func newChannel(opts Options, src Cursor, fan *Fanout, storeErr error) (*Channel, error) {
	if storeErr != nil {
		return nil, storeErr
	}
	o, err := checkOptions(opts, fan != nil)
	if err != nil {
		return nil, err
	}
	c := &Channel{
		opts:      o,
		backend:   o.Backend.Log,
		src:       src,
		fan:       fan,
		log:       o.Logger,
		closeCh:   make(chan struct{}),
		closeDone: make(chan struct{}),
		takers:    takers{done: make(chan struct{})},
		clockWake: make(chan struct{}, 1),
	}
	if err := c.checkStores(); err != nil {
		return nil, err
	}
	c.disk, _ = c.backend.(*diskqueue.Log)
	c.maxBody = math.MaxInt
	if c.backend != nil {
		if c.minBody, c.maxBody, err = bodyLimits(c.backend); err != nil {
			return nil, err
		}
	}
	if o.Keys != KeyNone {
		if c.keys, err = newKeyTable(o.Keys, o.DedupWindow, nil, o.KeyState); err != nil {
			return nil, err
		}
		// The Put-time policies name records; KeySerial keeps nothing.
		c.namesRecords = o.Keys != KeySerial && c.backend != nil
	}
	if c.backend != nil {
		c.passesSeen = c.src.Passed()
		c.passesLooked = c.passesSeen
	}
	c.closeCtx, c.cancel = context.WithCancel(context.Background())
	c.started = time.Now()
	c.now.Store(c.started.UnixNano())
	c.prod.firstID = firstID(o.KeyState)
	c.prod.nextID.Store(c.prod.firstID)
	if c.src == nil || o.MemQueueSize > 0 {
		c.memCh = make(chan *Message, o.MemQueueSize)
	}
	if fan != nil {
		// NextSeq first, then Depth: a record put in between is counted
		// unread, which at worst sends a message to the log that memory
		// could have taken, never the other way round.
		next := fan.log.NextSeq()
		c.readThrough.Store(next - min(uint64(max(src.Depth(), 0)), next))
	}
	if o.Deliveries.Log != nil {
		// Before the pump and the clock, which look entries up.
		c.openJournal(o.Deliveries, o.MaxAttempts > 0)
	}
	if c.src != nil {
		c.ahead.init()
		c.reader = new(backendReader)
		if c.backend != nil {
			c.diskPending.Store(c.src.Depth())
			if c.numbered {
				// Deferred records below it are counted as the pump
				// reads them: New does not read the backlog for them.
				c.diskDeferred.end = c.backend.NextSeq()
			}
		}
		if o.Timers.Log != nil {
			// Deferred messages are in the timer store, which is read
			// instead: the backlog is not.
			c.timers = newTimerSet(o.Timers, o.MaxDeferredInMemory)
			c.timers.horizon = timerEntry{due: math.MinInt64} // all of them are on the store only
			if fan != nil {
				c.initHeld()
			}
			c.mu.Lock()
			c.startRefillLocked()
			c.mu.Unlock()
		}
		c.wg.Add(1)
		go c.pump()
	}
	c.wg.Add(1)
	go c.clock()
	return c, nil
}

// Empty discards every message: in memory, in the backend, deferred,
// requeued and in flight (Finish on those returns ErrNotInFlight).
//
// Puts wait while Empty runs; a message deferred or requeued meanwhile
// may or may not be discarded.
func (c *Channel) Empty() error {
	// Puts wait meanwhile: a keyed Put between the new gen and the key
	// table's clearing would otherwise keep its message and lose its entry
	// (two pending messages of one key under KeyUnique).
	c.prod.putMu.Lock()
	defer c.prod.putMu.Unlock()
	if c.isClosed.Load() {
		return ErrClosed
	}
	// Before the new gen, so that a pump that sees the new gen sees this
	// too; Puts wait, so no record put from here on is below it.
	emptied := c.emptiedBelow.Load()
	if c.backend != nil && c.numbered {
		storeMax(&c.emptiedBelow, c.backend.NextSeq())
	}
	c.gen.Add(1)
	for len(c.memCh) > 0 {
		select {
		case <-c.memCh:
		default:
		}
	}
	c.lockFlights()
	c.dropFlightsLocked()
	c.mu.Lock()
	c.ready.takeAllLocked()
	c.deferred = nil
	if c.keys != nil {
		c.keys.empty()
	}
	if c.timers != nil {
		c.timers.empty()
		c.openHeldLocked() // what it held is discarded
		// Moves waiting to be settled: their old records go with the
		// backend's, and their new ones with the timer store's.
		c.takeMoves()
	}
	c.mu.Unlock()
	c.unlockFlights()
	if c.src != nil {
		if err := c.src.Empty(); err != nil {
			// Its records are still there, and to be delivered.
			c.emptiedBelow.Store(emptied)
			return fmt.Errorf("channel: empty backend: %w", err)
		}
		c.passMu.Lock()
		c.diskPending.Store(0)
		if c.backend != nil {
			// What the reads passed before now is counted off with the rest.
			c.passesSeen = c.src.Passed()
		}
		c.passMu.Unlock()
		c.diskDeferred.empty()
		if c.fan != nil {
			storeMax(&c.readThrough, c.fan.log.NextSeq())
		}
		c.ahead.drain()
	}
	if c.timers != nil {
		if err := c.timers.store.empty(); err != nil {
			return fmt.Errorf("channel: empty timer store: %w", err)
		}
	}
	if c.jrn != nil {
		if err := c.journalEmpty(); err != nil {
			return fmt.Errorf("channel: empty delivery journal: %w", err)
		}
	}
	return nil
}

// MsgTimeout returns Options.MsgTimeout as New took it (zero made the
// default): how long a delivery may go untouched. Workers touch a long
// job's message well within it.
func (c *Channel) MsgTimeout() time.Duration { return c.opts.MsgTimeout }

// atomicNumber is an atomic.Int64 or atomic.Uint64.
type atomicNumber[V int64 | uint64] interface {
	Load() V
	CompareAndSwap(old, new V) bool
}

// storeMax raises v to x if x is higher.
func storeMax[V int64 | uint64, A atomicNumber[V]](v A, x V) {
	for {
		old := v.Load()
		if old >= x || v.CompareAndSwap(old, x) {
			return
		}
	}
}

// Compacted tells the channel that a compaction of its backend removed
// record seq, of message id with key, before the channel read it, so it
// will never be delivered: under KeyReplace a version a newer one
// superseded, now counted in Stats.Superseded and no longer pending; if
// deferred says the record carried a due time ([RecordDeferred]), no
// longer in Stats.Deferred. (It leaves Stats.DiskDepth as the backend's
// reads pass over it: see [Cursor].Passed.) A compaction
// calls it once the removal is in place, for each removed record from the
// backend's read position on (spillq's Queue.Compact does); a removed
// record the channel had read already is still its own to drop as
// superseded when it takes it. It does nothing under the other policies,
// whose pending messages a compaction never removes.
func (c *Channel) Compacted(seq uint64, key []byte, id ID, deferred bool) {
	if c.keys == nil || c.opts.Keys != KeyReplace {
		return
	}
	c.keys.compacted(key, id)
	// Its place in the backlog (diskPending) the pump gives up as its
	// reads pass it (Cursor.Passed), here or after a restart; a deferred
	// one is counted off the deferred now, as the pump would on reading it.
	if c.backend != nil && deferred {
		c.diskDeferred.removed(seq)
	}
}

// KeyState returns a snapshot of the key policy's state for a restart to
// pick up (Options.KeyState), and whether there is one to keep: false
// under KeyNone and KeySerial (which keep nothing across a restart), or
// without a Backend. Puts wait while it copies the state, so that its
// watermark is exact: a cost of the number of keys.
func (c *Channel) KeyState() (KeyState, bool) {
	if !c.namesRecords {
		return KeyState{}, false
	}
	c.prod.putMu.Lock()
	st := KeyState{Policy: c.opts.Keys, Watermark: c.backend.NextSeq()}
	snap := c.keys.snapshot(c.backend.Floor(), c.stamp().UnixNano())
	c.prod.putMu.Unlock()
	st.Entries = snap.entries()
	return st, true
}

// Replay puts the records with from <= seq < to that the backend still
// holds back into the channel as fresh messages (new IDs, no attempts),
// for reprocessing after a bug fix. It returns how many it put. What it
// holds of finished messages is what its retention keeps (spillq's
// Disk.RetainBytes and RetainAge); without retention a finished record
// lasts only until its segment is deleted, at a moment of the log's
// choosing, so a replay then finds some or none of them. Without a
// Backend, or over one whose Log cannot Scan, it returns ErrNoReplay.
func (c *Channel) Replay(ctx context.Context, from, to uint64) (int, error) {
	if c.isClosed.Load() {
		return 0, ErrClosed
	}
	if c.backend == nil {
		return 0, ErrNoReplay
	}
	n := 0
	for rec, rerr := range c.backend.Scan(from, to) {
		if errors.Is(rerr, errors.ErrUnsupported) {
			return n, fmt.Errorf("%w: %w", ErrNoReplay, rerr)
		}
		if rerr != nil {
			err := fmt.Errorf("channel: replay: %w", rerr)
			if c.isClosed.Load() && !errors.Is(err, ErrClosed) {
				// The backend's files went with Close, under the read.
				err = errors.Join(ErrClosed, err)
			}
			return n, err
		}
		m, derr := decodeEnvelope(rec.Body)
		if derr != nil {
			c.cons.badRecords.Add(1)
			c.log.Warn("channel: replay skipped a record that is not a message", "err", derr)
			continue
		}
		if err := c.Put(ctx, m.Body); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}
