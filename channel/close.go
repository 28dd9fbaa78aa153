package channel

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/spillq/spillq/diskqueue"
)

// closeStoreWait bounds the time Close spends storing again what the
// channel holds (see Close).
const closeStoreWait = 5 * time.Second

// Close stops delivery and writes every message the channel holds in
// memory (buffered, requeued, deferred with their due times, and in flight)
// to the backend (deferred ones to the timer store, if there is one), then
// closes the timer store and the backend, so a graceful restart loses
// nothing and delivers again what was not finished. A message in flight is
// stored with the attempts it had before that delivery, which Close cut
// short (as [Message.Release] does): a deploy spends no attempt of the
// work it interrupts (its consumer's Finish, after, returns ErrClosed and
// the message is delivered again by the next run). Without a backend the
// messages still in memory are dropped, and Close reports how many. Calls
// blocked in Put or Receive return ErrClosed; a second Close returns
// ErrClosed.
//
// A message that came from the backend (or the timer store) is stored
// again to keep its attempts and due time; if that fails (the disk budget
// spent, say), its record stays as it was, and it is delivered again after
// a restart with the attempts that record counts. Only a message held in
// memory alone and not stored is lost, and counted in Close's error.
// Storing them all may take at most closeStoreWait (5 s) in all, for a
// backend that blocks when full (Disk.BlockWhenFull): nobody consumes
// during Close, so no room would come. What is left when that has passed
// is not tried; a store it cuts short while waiting for its fsync
// (Disk.SyncEvery 1) may have been written all the same, and delivers its
// message again after a restart, beside the old record or the loss
// Close reported.
//
// It runs in phases, each a method below: stopIntake, waitForWorkers,
// settleQueuedMoves, then, holding putMu, collectHeld and either dropHeld
// (no backend) or giveBackToSource and storeHeld, and last closeStores.
func (c *Channel) Close() error {
	if !c.isClosed.CompareAndSwap(false, true) {
		// Returned once the first Close is done, so a caller that closes
		// what it closes next (a topic, its log) does not pull it from
		// under that one.
		<-c.closeDone
		return ErrClosed
	}
	defer close(c.closeDone)
	c.stopIntake()
	c.waitForWorkers()
	c.settleQueuedMoves()
	if c.src == nil {
		return c.dropHeld()
	}
	errs := c.keepHeld()
	return errors.Join(append(errs, c.closeStores()...)...)
}

// stopIntake takes the channel off its topic, wakes everything that waits
// on closeCh, and cancels closeCtx, which blocking backend calls use.
func (c *Channel) stopIntake() {
	if c.fan != nil {
		// First, so the topic hands it nothing more through memory.
		c.fan.leave(c)
	}
	close(c.closeCh)
	c.cancel()
}

// waitForWorkers waits for everything that may still hand a message to
// the lists Close collects: Puts in progress, the channel's goroutines
// and the receivers between take and deliver.
func (c *Channel) waitForWorkers() {
	// Wait for Puts that were handing a message over: taking the write
	// lock is the barrier (they hold it shared), and none can start after,
	// since isClosed is set. Let go while the channel's goroutines and
	// receivers finish: a DeadLetter handler they run may Put (which
	// returns ErrClosed now), and waiting for it holding the lock left
	// each waiting for the other.
	c.prod.putMu.Lock()
	//lint:ignore SA2001 the lock is the barrier; nothing is done under it
	c.prod.putMu.Unlock()
	c.wg.Wait()
	c.waitTakers()
}

// waitTakers waits for the receivers enterTake let in. closeCh is closed,
// so none waits in take; what is left of each is a deliver. isClosed is
// set, so no receiver comes in after the count is read here.
func (c *Channel) waitTakers() {
	c.takers.closeAndWait()
}

// settleQueuedMoves settles the moves to the timer store the clock had
// not settled yet.
func (c *Channel) settleQueuedMoves() {
	if c.timers != nil {
		// Moves queued and not settled yet (settleDue), none to come: the
		// goroutines and Requeues that queue them are done.
		c.settleDue() // settleMoves syncs past the cancelled closeCtx
	}
}

// dropHeld is Close's end for a channel without a backend: what it holds
// has nowhere to go, and is counted in the error.
func (c *Channel) dropHeld() error {
	c.prod.putMu.Lock() // as in keepHeld
	defer c.prod.putMu.Unlock()
	held, _ := c.collectHeld()
	if len(held) > 0 {
		return fmt.Errorf("channel: closed with %d messages in memory and no backend to keep them", len(held))
	}
	return nil
}

// keepHeld collects what the channel holds and stores it again, for the
// next run, returning what went wrong.
func (c *Channel) keepHeld() []error {
	// Held while what the channel holds is stored again below, so a
	// snapshot of the key state (KeyState) sees that done or not begun,
	// never halfway. Let go before the stores close: the backend's Close
	// may take a last KeyState.
	c.prod.putMu.Lock()
	defer c.prod.putMu.Unlock()
	held, ahead := c.collectHeld()
	c.giveBackToCursor(ahead, held)
	return c.storeHeld(held)
}

// collectHeld takes out of the channel every message it holds in memory
// (held: the memory buffer, the ready list, the deferred heap, the flights
// and the messages parked behind their keys) and what the pump read ahead
// and did not hand over (ahead, still in the source as they were). The
// caller holds putMu.
func (c *Channel) collectHeld() (held, ahead []*Message) {
	var unspent []*Message
	// Without waiting: a receiver may still take from the buffer (take
	// looks at it before it looks at closeCh), and one that takes the
	// last message between a length check and a receive here would leave
	// Close waiting for ever on a buffer no Put can fill again.
drain:
	for {
		select {
		case m := <-c.memCh:
			held = append(held, m)
		default:
			break drain
		}
	}
	// What was read ahead and not taken. The pump has returned and the
	// receivers have left take: no reader holds anything read.
	ahead = c.ahead.drain()
	c.lockFlights()
	c.mu.Lock()
	held = append(held, c.ready.takeAllLocked()...)
	held = append(held, c.deferred...)
	for _, m := range c.dropFlightsLocked() {
		// A delivery Close cuts short is not spent: stored with the
		// attempts it had before (a copy: its consumer may still read
		// it).
		again := m.redelivery()
		again.unspend()
		held = append(held, again)
		unspent = append(unspent, again)
	}
	if c.keys != nil {
		held = append(held, c.keys.parked()...)
	}
	c.deferred = nil
	c.collected = true
	c.mu.Unlock()
	c.unlockFlights()
	for _, m := range unspent {
		// One not stored again below (or kept in place) is delivered
		// after a restart with the attempts its journal record says.
		c.journalUnspent(m)
	}
	return held, ahead
}

// staysInPlace reports whether a held message keeps its record where it
// is rather than being stored again.
//
// Under KeySerial a keyed message read from the backend stays where
// it is, unacknowledged, so the next run delivers it in its place
// among its key's messages (a new record would come after them); its
// attempts since it was stored are not counted.
//
// On a topic whose key policy pins keyed records (see pinsRecord),
// such a message stays in place too, deferred or not (a delay its
// record does not carry is then lost: it comes again at once).
func (c *Channel) staysInPlace(m *Message) bool {
	if m.src != srcBackend || m.Key == nil {
		return false
	}
	return c.keepsSerialPlace(m) || c.opts.Keys == KeySerial && m.due == 0 || c.fan != nil && c.pinsRecord(m)
}

// giveBackToCursor returns to a topic's cursor what the pump read ahead
// and the held messages that stay in place. (A channel's own backend
// closes with it: its records stay stored until acknowledged, and a
// restart reads them again.)
func (c *Channel) giveBackToCursor(ahead, held []*Message) {
	if c.fan == nil {
		return
	}
	// The cursor outlives the channel (it stays open with the topic's
	// log), its read position past what the pump read ahead (and past
	// what stays in place): given back, in seq order, for the channel
	// opened next in its place.
	back := ahead
	for _, m := range held {
		if c.staysInPlace(m) {
			back = append(back, m)
		}
	}
	slices.SortFunc(back, func(a, b *Message) int { return cmp.Compare(a.seq, b.seq) })
	recs := make([]diskqueue.Record, 0, len(back))
	for _, m := range back {
		if m.gen == c.gen.Load() {
			recs = append(recs, diskqueue.Record{Seq: m.seq, Body: appendEnvelope(nil, m)})
		}
	}
	if err := c.src.Unread(recs); err != nil {
		// They stay in flight on the cursor: the next run of the log
		// delivers them again.
		c.log.Warn("channel: close: cannot give back to the topic's cursor what the channel read and did not deliver; it comes again after the log reopens", "messages", len(recs), "err", err)
	}
}

// heldStores is storeHeld's account: where each held message went, and
// what it could not store.
type heldStores struct {
	// ctx bounds every store to Close's time for them all; once that has
	// passed, none is tried.
	ctx     context.Context
	closing int64 // Unix ns: the due time of what a topic's channel held
	// What went to each store, their old records to acknowledge.
	toTimerStore, toBackend []*Message
	// A held message Close could not store: lost if it was in memory
	// only, else still in its record; the first error of each.
	lost, kept       int
	lostErr, keptErr error
}

// store runs one store of a held message, within Close's time for them
// all.
func (s *heldStores) store(put func(ctx context.Context) error) error {
	if err := s.ctx.Err(); err != nil {
		return err
	}
	return put(s.ctx)
}

// notStored counts a held message Close could not store.
func (s *heldStores) notStored(m *Message, err error) {
	if m.src != srcMemory {
		s.kept++
		s.keptErr = cmp.Or(s.keptErr, err)
		return
	}
	s.lost++
	s.lostErr = cmp.Or(s.lostErr, err)
}

// storeHeld stores again each held message that does not stay in place,
// then acknowledges the old records of those stored (settleMoves). The
// caller holds putMu.
func (c *Channel) storeHeld(held []*Message) []error {
	ctx, cancel := context.WithTimeout(context.Background(), closeStoreWait)
	defer cancel()
	s := &heldStores{ctx: ctx, closing: time.Now().UnixNano()}
	for _, m := range held {
		c.storeOneHeld(s, m)
	}
	return c.settleHeld(s)
}

// storeOneHeld stores m again, noting in s where it went.
func (c *Channel) storeOneHeld(s *heldStores, m *Message) {
	if m.gen != c.gen.Load() || c.staysInPlace(m) {
		return
	}
	if c.opts.Keys == KeyReplace && m.Key != nil {
		// A superseded version stored again would come after the
		// newer one in the backend, where a restart, which knows the
		// newest by its record, could take it for the newest.
		if _, drop := c.keys.take(m); drop {
			c.dropSuperseded(m)
			return
		}
	}
	// The record (if any) is replaced by one carrying the current
	// attempts and due time: in the timer store for a deferred
	// message, if there is one, else in the backend. A topic's
	// channel writes to no log of its own: everything it holds goes
	// to its timer store, due when it was closed if not deferred, so
	// the next run delivers it first.
	toTimers := c.timers != nil && (m.due != 0 || c.backend == nil) && !(c.pinsRecord(m) && c.backend != nil)
	if toTimers && m.due == 0 {
		m.due = s.closing
	}
	env := appendEnvelope(nil, m)
	if toTimers {
		err := s.store(func(ctx context.Context) error {
			_, err := c.timers.store.put(ctx, env)
			return err
		})
		// ErrNotDurable: stored, its fsync not waited for (the
		// store's Close makes it durable); a second copy would
		// deliver it twice.
		if stored(err) {
			if m.Key != nil && c.namesRecords {
				c.keys.stored(m.Key, m.ID, 0, srcTimers)
			}
			s.toTimerStore = append(s.toTimerStore, m)
			return
		}
		if c.backend == nil {
			s.notStored(m, err)
			return
		}
	}
	// A copy: putEnvelope notes the new record in it, and m's seq
	// is the old record, acknowledged below.
	cp := *m
	if err := s.store(func(ctx context.Context) error { return c.putEnvelope(ctx, &cp, env) }); !stored(err) {
		s.notStored(m, err)
		return
	}
	if cp.Key != nil && c.namesRecords {
		c.keys.stored(cp.Key, cp.ID, cp.seq, srcBackend)
	}
	s.toBackend = append(s.toBackend, m)
}

// settleHeld acknowledges the old records of the messages stored again
// once the new ones are durable (settleMoves), and reports what could not
// be stored.
func (c *Channel) settleHeld(s *heldStores) []error {
	var errs []error
	if len(s.toTimerStore) > 0 { // there is a timer store
		if err := c.settleMoves(s.ctx, c.timers.store.log, s.toTimerStore, "stored again at close"); err != nil {
			errs = append(errs, fmt.Errorf("channel: close: %w", err))
		}
	}
	if err := c.settleMoves(s.ctx, c.backend, s.toBackend, "stored again at close"); err != nil {
		errs = append(errs, fmt.Errorf("channel: close: %w", err))
	}
	if s.kept > 0 {
		c.log.Warn("channel: close: cannot store messages again; their records stay, and they are delivered again after a restart", "messages", s.kept, "err", s.keptErr)
	}
	if s.lost > 0 {
		errs = append(errs, fmt.Errorf("channel: close: %d messages held in memory only are lost: %w", s.lost, s.lostErr))
	}
	return errs
}

// closeStores closes (Store.Close) the delivery journal, the timer store
// and the backend, in that order, once what the channel held is in them.
// A topic's channel has no backend: its timer store closes last, and what
// its Close does (spillq's, telling the topic) comes after the rest.
func (c *Channel) closeStores() []error {
	var errs []error
	if err := closeStore(c.opts.Deliveries); err != nil {
		errs = append(errs, fmt.Errorf("channel: close delivery journal: %w", err))
	}
	if err := closeStore(c.opts.Timers); err != nil {
		errs = append(errs, fmt.Errorf("channel: close timer store: %w", err))
	}
	if err := closeStore(c.opts.Backend); err != nil {
		errs = append(errs, fmt.Errorf("channel: close backend: %w", err))
	}
	return errs
}
