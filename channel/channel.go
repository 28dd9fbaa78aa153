package channel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spillq/spillq/internal/broadcast"
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
	// passesLooked is the count at the pump's last look (the pump's
	// own): unchanged, there is nothing to take off, and no lock to take.
	passesLooked int64
	// unsent is what the pump had read and not handed over when the
	// channel closed; Close gives it back to a topic's cursor once the
	// pump has returned.
	unsent []*Message
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

	// ahead is the pump's read-ahead of backend records; its chans are
	// nil without a Cursor.
	ahead readAhead

	// mu guards the fields below, and every message's state while it is
	// ready or deferred.
	mu    sync.Mutex
	ready []*Message // requeued, timed out or due: delivered before the memory buffer
	// readyN is len(ready), written under mu, so that the receive path
	// sees an empty ready list without taking the lock.
	readyN atomic.Int64
	// readyBell wakes the receivers waiting in take when ready gains a
	// message.
	readyBell broadcast.Broadcast
	deferred  deferHeap // whole messages: without a timer store, or where it failed
	// collected is set by Close once it has taken ready and deferred:
	// nothing added to them after is stored.
	collected bool
	// timers is the view of Options.Timers; nil without one.
	timers *timerSet
	// held keeps a topic's channel's receivers to what its timer store
	// held at New until that is ready (see heldGate).
	held         heldGate
	unpausedCh   chan struct{} // closed by Unpause
	pausedCh     chan struct{} // closed by Pause, for the Messages forwarder
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
	// paused is written under mu (with unpausedCh) and read without it on
	// the receive path.
	paused atomic.Bool

	prod    producerCounters // written by every Put, on cache lines of its own
	cons    consumerCounters
	latency histogram.Histogram
	moves   moveQueue

	// jrn is the view of Options.Deliveries; nil without one. jBacklog
	// is the pump's: the entries New read for records of the Cursor,
	// by seq (journalBacklog).
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
	// taking counts the receivers between take and deliver (enterTake),
	// where the message they took is in no list Close collects; Close adds
	// takingClosed to it, and the receiver that brings it back down to
	// that closes takersDone (waitTakers).
	taking      atomic.Int64
	takersDone  chan struct{}
	takersClose sync.Once
}

// moveQueue holds the messages moved to the timer store (deferred) whose
// old records wait to be acknowledged until the timer store has made the
// new ones durable (settler).
type moveQueue struct {
	mu      sync.Mutex
	pending []*Message
	// n is len(pending), for a look without mu (settleBefore).
	n     atomic.Int64
	since time.Time // when the first of pending came
	bell  chan struct{}
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
		cons:      consumerCounters{takersDone: make(chan struct{})},
		clockWake: make(chan struct{}, 1),
	}
	if err := c.checkStores(); err != nil {
		return nil, err
	}
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
			c.moves.bell = make(chan struct{}, 1)
			c.wg.Add(1)
			go c.settler()
		}
		c.wg.Add(1)
		go c.pump()
	}
	c.wg.Add(1)
	go c.clock()
	return c, nil
}

// Receive returns the next message, waiting until there is one, ctx ends
// or the channel closes. The message is in flight until Finish or Requeue;
// if neither comes within MsgTimeout, it is delivered again.
//
// Requeued and timed-out messages are delivered first, then the memory
// buffer, then the backend, which holds only messages newer than any in
// memory. On a topic's channel, what it held at its last Close comes
// before all of them: until its timer store has been read for those,
// Receive takes nothing else (see [Fanout.Join]). With a ctx that is
// already done, Receive takes nothing and returns ctx.Err(), so a worker
// loop stops taking work as soon as its ctx ends, backlog or not;
// [Channel.TryReceive] takes a message without waiting.
func (c *Channel) Receive(ctx context.Context) (*Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return c.receive(ctx)
}

// TryReceive returns a message that is ready now, without waiting: nil
// and [ErrNoMessage] when there is none (or the channel is paused).
func (c *Channel) TryReceive() (*Message, error) {
	if c.isClosed.Load() {
		// Else a paused channel's wait could report the done ctx first.
		return nil, ErrClosed
	}
	m, err := c.receive(doneCtx)
	if err == context.Canceled {
		return nil, ErrNoMessage
	}
	return m, err
}

// doneCtx is a context that is done: take, given it, looks at what is
// ready and does not wait.
var doneCtx = func() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}()

func (c *Channel) receive(ctx context.Context) (*Message, error) {
	for {
		if err := c.waitUnpaused(ctx); err != nil {
			return nil, err
		}
		m, err := c.receiveOne(ctx)
		if err == errPaused {
			continue
		}
		if err != nil || m != nil {
			return m, err
		}
	}
}

// receiveOne takes a message and puts it in flight, all within the take
// (enterTake). It returns nil and no error for one taken and not to be
// delivered (dropped, dead-lettered, parked behind its key), and errPaused
// when Pause came first or as it took one (which goes back, undelivered,
// ahead of everything).
func (c *Channel) receiveOne(ctx context.Context) (*Message, error) {
	if !c.enterTake() {
		return nil, ErrClosed
	}
	defer c.leaveTake()
	m, err := c.take(ctx)
	if err != nil {
		return nil, err
	}
	if c.paused.Load() && c.giveBack(m) {
		return nil, errPaused
	}
	if m, ok := c.deliver(m); ok {
		return m, nil
	}
	return nil, nil
}

// keepsSerialPlace reports whether m, requeued with a delay, waits in
// memory with its record left in place rather than moving to the timer
// store: under KeySerial, on a channel of its own, a keyed message from
// the backend. It holds its key while it waits, and so must its record
// across a restart: moved to the timer store, due later, the key's next
// message, still in place in the backend, was delivered first by the next
// run, which holds no key. Its delay is then not kept by a restart (the
// record does not carry it): it comes again at once, first of its key.
//
// At most MaxDeferredInMemory wait so (each whole, in memory, its segment
// kept): past that one goes to the timer store, and a restart may deliver
// its key's next message ahead of it.
func (c *Channel) keepsSerialPlace(m *Message) bool {
	if c.opts.Keys != KeySerial || c.fan != nil || m.Key == nil || m.src != srcBackend {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.deferred) < c.opts.MaxDeferredInMemory
}

// enterTake counts a receiver in from take to deliver, where the message
// it took is in none of the lists Close collects, and Close waits for it
// (waitTakers) before collecting them: a message taken from the memory
// buffer as Close ran was put in flight after Close had collected the
// flights, neither stored nor counted lost, and a Requeue of it returned
// nil. It returns false once Close has begun. The count goes up before
// isClosed is looked at, and Close sets isClosed before it waits, so a
// receiver either sees Close begun or is waited for.
func (c *Channel) enterTake() bool {
	c.cons.taking.Add(1)
	if c.isClosed.Load() {
		c.leaveTake()
		return false
	}
	return true
}

func (c *Channel) leaveTake() {
	if c.cons.taking.Add(-1) == takingClosed {
		c.cons.takersClose.Do(func() { close(c.cons.takersDone) })
	}
}

// takingClosed is what Close adds to the count of receivers in take: far
// above any number of goroutines, so the count is back to it exactly
// when every receiver let in has left (one refused after Close began
// leaves it there too, with none in).
const takingClosed = 1 << 40

// giveBack returns a message take handed out and nobody received to the
// front of the ready list, where the next take finds it first.
// It returns false, leaving m to the caller, once Close has begun: Close
// sets isClosed before it collects the ready list under c.mu, so a
// message given back after that would be in nobody's hands.
func (c *Channel) giveBack(m *Message) bool {
	c.mu.Lock()
	if c.isClosed.Load() {
		c.mu.Unlock()
		return false
	}
	c.ready = slices.Insert(c.ready, 0, m)
	c.readyN.Store(int64(len(c.ready)))
	c.mu.Unlock()
	c.readyBell.Notify()
	return true
}

// errPaused is take's: Pause came while it waited, and it took nothing.
var errPaused = errors.New("channel: paused")

// take gets the next message from any source: the ready list, then the
// memory buffer, then the backend.
//
// Receivers take from the ready list themselves rather than through a
// hand-off from the clock goroutine, so a message requeued by this
// goroutine a moment ago is already there for its next Receive.
func (c *Channel) take(ctx context.Context) (*Message, error) {
	for {
		if m := c.popReady(); m != nil {
			return m, nil
		}
		// Until a topic's channel has what it held at its last Close on
		// the ready list, nothing else (heldGate): nil chans below.
		held := c.heldWait()
		mem, bell := c.memCh, c.ahead.bell
		if held != nil {
			mem, bell = nil, nil
		}
		// Memory before disk (disk holds only newer messages), each looked
		// at without waiting: a done ctx still gets a message the pump has
		// ready, and a backlog costs no lock.
		select {
		case m := <-mem:
			return m, nil
		default:
		}
		if held == nil {
			if m, _ := c.ahead.pop(); m != nil {
				c.takenAhead(m)
				return m, nil
			}
		}
		wait := c.readyBell.Wait()
		// Look again now that we are registered for the next ready
		// message, so one added between the two is not missed.
		if m := c.popReady(); m != nil {
			return m, nil
		}
		// A Receive waiting here when Pause comes returns to wait for
		// Unpause without taking a message, so waiting receivers do not
		// each take one and give them back in reverse order.
		paused, unpaused := c.pauseSignals()
		if unpaused != nil {
			return nil, errPaused
		}
		if c.takeWaitsForTesting != nil {
			c.takeWaitsForTesting()
		}
		select {
		case <-paused:
			return nil, errPaused
		case <-wait:
		case <-held: // open now: look everywhere
		case m := <-mem:
			return m, nil
		case <-bell:
			// The token is this receiver's to pass on: a message it
			// leaves behind must wake the next one waiting.
			//
			// Memory first, as above: select picks at random among the
			// cases ready, and a message that reached memory while this
			// receiver came to wait is older than the backend's. Taken
			// from the read-ahead, it went out after a newer one: a
			// spill drained out of put order (TestSpillAndDrain, under
			// -race -cpu 1).
			select {
			case m := <-c.memCh:
				if c.ahead.len() > 0 {
					c.ahead.ring()
				}
				return m, nil
			default:
			}
			m, more := c.ahead.pop()
			if more {
				c.ahead.ring()
			}
			if m != nil {
				c.takenAhead(m)
				return m, nil
			}
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.closeCh:
			return nil, ErrClosed
		}
	}
}

// takenAhead counts a message taken from the pump's read-ahead off
// diskPending, unless it was read before an Empty, which counted it off
// already (deliver drops it): counted twice, a few stale ones brought
// diskPending to zero with newer records still in the backend, and Put
// sent the next messages to memory, ahead of them.
func (c *Channel) takenAhead(m *Message) {
	if m.gen == c.gen.Load() {
		c.delivered()
	}
}

// popReady takes the oldest message from the ready list, or returns nil.
func (c *Channel) popReady() *Message {
	if c.readyN.Load() == 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.ready) == 0 {
		return nil
	}
	m := c.ready[0]
	c.ready[0] = nil
	c.ready = c.ready[1:]
	c.readyN.Store(int64(len(c.ready)))
	return m
}

// addReadyLocked appends m to the ready list; the caller holds c.mu, and
// rings readyBell once it has let go of it.
func (c *Channel) addReadyLocked(m *Message) {
	c.ready = append(c.ready, m)
	c.readyN.Store(int64(len(c.ready)))
}

// deliver puts a taken message in flight. It returns false for a message
// that must not reach a consumer: discarded by Empty, expired or out of
// attempts (dead-lettered here, within the take, so that Close waits for
// the handler and its acknowledgement of the record before it closes the
// stores).
func (c *Channel) deliver(m *Message) (*Message, bool) {
	if m.gen != c.gen.Load() {
		c.keyDone(m) // emptied: it holds its key no more
		return nil, false
	}
	if m.src == srcBackend && c.src.Discarded(m.seq) {
		c.keyDone(m)
		return nil, false
	}
	if m.expires != 0 && time.Now().UnixNano() > m.expires {
		c.cons.expired.Add(1)
		c.deadLetter(m, ErrExpired)
		return nil, false
	}
	if c.exhausted(m) {
		// Its deliveries used up before it came here: the delivery
		// journal counted deliveries a crash cut short (a job that kills
		// its process), or a dead-letter handler refused it and it came
		// round again. Delivered, it would go past MaxAttempts.
		c.deadLetter(m, ErrMaxAttempts)
		return nil, false
	}
	if m.Key != nil && c.fan != nil && c.fan.keys != nil && c.fan.keys.policy == KeyReplace && c.fan.keys.supersedes(m.Key, m.ID) {
		c.cons.superseded.Add(1)
		c.dropSuperseded(m)
		return nil, false
	}
	if c.keys != nil && m.Key != nil {
		switch ok, drop := c.keys.take(m); {
		case drop:
			c.dropSuperseded(m)
			return nil, false
		case !ok:
			return nil, false // parked behind its key's message (KeySerial)
		}
	}
	if c.jrn != nil {
		// Before it is in flight, where its answers look at m.jrec.
		c.journalDeliver(m)
	}
	f := c.flightFor(m)
	f.mu.Lock()
	m.Attempts++
	m.deadline = c.now.Load() + int64(c.opts.MsgTimeout)
	m.state = stateInFlight
	f.link(m)
	f.mu.Unlock()
	return m, true
}

// ReceiveBatch waits for one message like Receive, then takes up to max-1
// more that are ready without waiting.
func (c *Channel) ReceiveBatch(ctx context.Context, max int) ([]*Message, error) {
	if max < 1 {
		return nil, fmt.Errorf("%w: ReceiveBatch max %d", ErrInvalidOptions, max)
	}
	first, err := c.Receive(ctx)
	if err != nil {
		return nil, err
	}
	out := []*Message{first}
	for len(out) < max && !c.isPaused() {
		m, err := c.receiveOne(doneCtx)
		if err != nil {
			break
		}
		if m != nil {
			out = append(out, m)
		}
	}
	return out, nil
}

// Messages returns a Go channel of messages, for use in select. Each
// message received from it is in flight, exactly as from Receive, its
// MsgTimeout running from when it was received. The Go channel is closed
// when the Channel closes. One message at a time waits to be received
// from it, taken from the Channel (in flight, its attempt counted) and
// kept from timing out until a consumer has it: Receive never returns that
// one, so a program that reads the Go channel only now and then (in a
// select with a timeout, say) and otherwise calls Receive leaves it
// waiting until it reads the Go channel again or closes the Channel (which
// stores it for the next run). Use one of the two.
func (c *Channel) Messages() <-chan *Message {
	c.messagesOnce.Do(func() {
		c.messagesCh = make(chan *Message)
		// Under putMu, as a Put: Close sets isClosed, then takes putMu
		// before it waits for wg, so the Add is either seen by that Wait
		// or sees isClosed (an Add racing a Wait from zero is not
		// allowed).
		c.prod.putMu.RLock()
		defer c.prod.putMu.RUnlock()
		if c.isClosed.Load() {
			close(c.messagesCh)
			return
		}
		c.wg.Add(1)
		go c.forward()
	})
	return c.messagesCh
}

// forward feeds Messages. The message it holds until a consumer takes it
// is in flight: without the Touches its timeout ran out while nobody read
// the Go channel, and it came again with an attempt counted (dead-lettered
// unseen with MaxAttempts 1).
func (c *Channel) forward() {
	defer c.wg.Done()
	defer close(c.messagesCh)
	// Touching more often than every millisecond would spin for a
	// degenerate MsgTimeout, which times messages out before anyone can
	// take them anyway.
	every := max(c.opts.MsgTimeout/2, time.Millisecond)
	hold := time.NewTicker(every)
	defer hold.Stop()
	for {
		m, err := c.Receive(c.closeCtx)
		if err != nil {
			return
		}
		hold.Reset(every)
		for handed := false; !handed; {
			// Paused after this goroutine took m, it holds m back until
			// Unpause: a nil send case is never chosen.
			send := c.messagesCh
			paused, unpaused := c.pauseSignals()
			if unpaused != nil {
				send = nil
			}
			select {
			case send <- m:
				// The consumer's whole timeout from now on. It may have
				// finished the message already: then there is nothing to
				// touch.
				_ = m.Touch()
				handed = true
			case <-paused:
			case <-unpaused:
			case <-hold.C:
				if m.Touch() != nil {
					// Timed out all the same (a stall longer than half
					// the timeout): it is delivered again, or was
					// dead-lettered, and this copy is no longer in flight.
					handed = true
				}
			case <-c.closeCh:
				// m stays in flight; Close writes it to the backend.
				return
			}
		}
	}
}

func (c *Channel) wakeClock() {
	select {
	case c.clockWake <- struct{}{}:
	default:
	}
}

// Pause stops delivery: Receive waits until Unpause, also one waiting
// already (a message it was about to return goes back first in line), and
// the goroutine behind Messages holds back the message it holds (in
// flight, kept from timing out). Put goes on.
func (c *Channel) Pause() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.paused.Load() {
		c.paused.Store(true)
		c.unpausedCh = make(chan struct{})
		if c.pausedCh != nil {
			close(c.pausedCh)
			c.pausedCh = nil
		}
	}
}

// Unpause resumes delivery.
func (c *Channel) Unpause() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paused.Load() {
		c.paused.Store(false)
		close(c.unpausedCh)
	}
}

func (c *Channel) isPaused() bool { return c.paused.Load() }

// pauseSignals returns, while the channel is not paused, a channel Pause
// closes (and nil), and while it is, nil and a channel Unpause closes.
func (c *Channel) pauseSignals() (paused, unpaused <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.paused.Load() {
		return nil, c.unpausedCh
	}
	if c.pausedCh == nil {
		c.pausedCh = make(chan struct{})
	}
	return c.pausedCh, nil
}

func (c *Channel) waitUnpaused(ctx context.Context) error {
	if !c.paused.Load() {
		return nil
	}
	c.mu.Lock()
	if !c.paused.Load() {
		c.mu.Unlock()
		return nil
	}
	ch := c.unpausedCh
	c.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.closeCh:
		return ErrClosed
	}
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
	c.ready = nil
	c.readyN.Store(0)
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

// Depth is the number of messages waiting for delivery: Stats' MemoryDepth
// + DiskDepth + Ready. It leaves out messages in flight and deferred ones,
// in memory or in the backend (for a moment after New, not all of those
// in the backend: see Stats.Deferred). A message a Receive is taking at that moment
// is in neither Depth nor InFlight for an instant: to tell a channel has
// drained, see both at zero twice, with no Finish in between.
func (c *Channel) Depth() int64 {
	return int64(len(c.memCh)) + c.diskDepth() + c.readyN.Load()
}

// diskDepth is the messages in the backend waiting for delivery: for a
// topic's channel, the records of the topic's log it has not read yet and
// those the pump has ready.
func (c *Channel) diskDepth() int64 {
	if c.fan != nil {
		next, read := c.fan.log.NextSeq(), c.readThrough.Load()
		// A record may be read a moment before NextSeq counts it.
		return int64(next-min(read, next)) + int64(c.ahead.len())
	}
	return max(c.diskPending.Load()-c.diskDeferred.n.Load(), 0)
}

// monotonic is the time now on the channel's clock: Unix ns at New plus
// the monotonic time since, immune to the wall clock stepping.
func (c *Channel) monotonic() int64 {
	return c.started.UnixNano() + int64(time.Since(c.started))
}

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

// Stats is a snapshot of a channel's state and counters.
type Stats struct {
	MemoryDepth int // messages in the memory buffer
	MemoryBound int // MemQueueSize
	// DiskDepth is the messages stored in the backend and waiting for
	// delivery: not yet handed to a consumer, and not deferred.
	DiskDepth int64
	// BackendDepth is the records in the backend not acknowledged,
	// including those of messages in flight or deferred.
	BackendDepth int64
	InFlight     int // delivered, not yet finished or requeued
	// Deferred is the messages put or requeued with a delay and not yet
	// released for delivery, wherever they wait: in the timer store (see
	// Options.Timers; counted from the moment a restart opens it), in
	// memory until their due time, or in the backend until the channel
	// reads them back. One in the backend counts here until it is read
	// back, even if its due time passes first because a backlog stands
	// before it. Deferred messages in the backend that were put before
	// New (by a version without a timer store, with a channel without
	// one, or with a key under KeyUnique or KeyReplace, whose record stays
	// in the backend while pending) count in DiskDepth until the channel
	// reads them back, and here from then on: New does not read the
	// backlog to find them.
	Deferred int
	Ready    int // requeued, timed out or released when due, waiting for delivery
	Paused   bool

	Puts        int64 // messages accepted by Put
	Spills      int64 // of those, written to the backend (a deferred one written to the timer store is not)
	Requeues    int64 // Requeue calls on messages in flight, also those that dead-lettered them (MaxAttempts)
	Timeouts    int64 // deliveries that timed out
	Finishes    int64
	DeadLetters int64 // taken by the dead-letter handler (attempts, Fail or expiry)
	Expired     int64 // of those, expired before delivery
	// Failed counts Fail calls (each then counts in DeadLetters once the
	// handler takes it); Released counts Release calls; DeadLetterErrors
	// counts the dead-letter handler's errors (each message it refused
	// kept and tried again).
	Failed, Released, DeadLetterErrors int64
	BadRecords                         int64 // backend records that were not channel messages
	// ReadErrors counts the backend's reads that failed (an I/O error, a
	// file cut short under the queue), each tried again 100 ms later;
	// ReadErr is the last one's error while they fail, nil once a read
	// succeeds. While reads fail, nothing of the backend is delivered and
	// Receive waits on.
	ReadErrors int64
	ReadErr    error

	// The key policy's (Options.Keys) figures, zero under KeyNone.
	// KeysPending is the keys with a message pending (KeyUnique,
	// KeyReplace), remembered within the window (KeyDedup) or being
	// worked on (KeySerial); KeyWaiting the messages waiting behind a
	// key's message (KeySerial; they count in no other depth); Duplicates
	// the Puts refused (KeyUnique, KeyDedup); Superseded the messages
	// replaced by a newer one before delivery (KeyReplace), counted as
	// the channel takes them, or as a compaction removes one the channel
	// has not read from the backend (one it has read ahead counts when it
	// is taken).
	KeysPending, KeyWaiting int
	Duplicates, Superseded  int64

	// End-to-end latency, from Put to Finish, of finished messages: the
	// upper bound of the histogram bucket (within 19%) holding each
	// percentile. While a backlog waits, one finish in 8 is timed and
	// stands for the others (a clock read is a good share of the memory
	// path); otherwise every finish is.
	LatencyP50, LatencyP99, LatencyP999 time.Duration
}

// Stats returns a snapshot of the channel's state and counters.
func (c *Channel) Stats() Stats {
	inFlight := c.inFlight()
	c.mu.Lock()
	st := Stats{
		InFlight: inFlight,
		Deferred: len(c.deferred) + int(c.diskDeferred.n.Load()),
		Ready:    len(c.ready),
		Paused:   c.paused.Load(),
	}
	released := 0
	if c.timers != nil {
		released = len(c.timers.out)
	}
	c.mu.Unlock()
	if c.timers != nil {
		st.Deferred += max(int(c.timers.store.cur.Depth())-released, 0)
	}
	st.MemoryDepth = len(c.memCh)
	st.MemoryBound = c.opts.MemQueueSize
	st.DiskDepth = c.diskDepth()
	if c.src != nil {
		st.BackendDepth = c.src.Depth()
	}
	st.Puts = int64(c.prod.nextID.Load()-c.prod.firstID) - c.prod.putFailures.Load()
	st.Spills, st.Requeues = c.prod.spills.Load(), c.cons.requeues.Load()
	st.Timeouts, st.Finishes = c.cons.timeouts.Load(), c.cons.finishes.Load()
	st.DeadLetters, st.Expired, st.BadRecords = c.cons.deadLetters.Load(), c.cons.expired.Load(), c.cons.badRecords.Load()
	st.Failed, st.Released, st.DeadLetterErrors = c.cons.failed.Load(), c.cons.releases.Load(), c.cons.deadLetterErrors.Load()
	st.ReadErrors = c.cons.readErrors.Load()
	if e := c.cons.readErr.Load(); e != nil {
		st.ReadErr = *e
	}
	if c.keys != nil {
		st.KeysPending, st.KeyWaiting = c.keys.stats(c.stamp().UnixNano())
		st.Duplicates, st.Superseded = c.keys.duplicates.Load(), c.keys.superseded.Load()
	}
	st.Superseded += c.cons.superseded.Load()
	p := c.latency.Percentiles(0.5, 0.99, 0.999)
	st.LatencyP50, st.LatencyP99, st.LatencyP999 = p[0], p[1], p[2]
	return st
}

// LatencyBuckets returns the end-to-end latency histogram (Put to Finish)
// behind Stats' percentiles: the exclusive upper bound of each non-empty
// bucket and its count, bounds increasing. Buckets are four per power of two.
// The counts add up to the finishes; see Stats.LatencyP50 for how they are
// timed under load.
func (c *Channel) LatencyBuckets() (upper []time.Duration, counts []uint64) {
	return c.latency.Snapshot()
}

// LatencySumSeconds returns the sum, in seconds, of the latencies counted
// in [Channel.LatencyBuckets]: a histogram's _sum, exact for the finishes
// that were timed (see Stats.LatencyP50 for the others). Read after
// LatencyBuckets, it may include a few finishes that came in between.
func (c *Channel) LatencySumSeconds() float64 {
	return c.latency.SumSeconds()
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
