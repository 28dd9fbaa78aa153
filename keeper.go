package spillq

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// keySaveInterval is how often a queue with a key policy stores its state
// (less often when storing it takes more than a twentieth of that): a
// crash makes the next Open read the records put since the last store.
// A variable only so that tests waiting for a store need not wait a
// second each (export_test.go); a keeper reads it once, as it starts.
var keySaveInterval = time.Second

// keeper does the background work of a queue or a topic that keeps a key
// state or compacts: it stores the key state every keySaveInterval (less
// often when storing it takes more than a twentieth of that), and as soon
// as that allows when a Put at MaxDiskBytes finds the hold keeping
// acknowledged segments (pressure), and starts a compaction once the log
// is dirty enough. close stops both, then stores the key state a last
// time.
type keeper struct {
	dir    string
	modes  fileModes // the key state's
	logger *slog.Logger
	// state returns the key state to store, if there is one; changes, the
	// counters that move when it does, to skip idle rounds. Both nil
	// without a key state.
	state   func() (keyFile, bool)
	changes func() [4]int64
	// hold keeps the log's segments from the stored state's watermark on
	// (and a KeyDedup queue's timer store's from its timer mark), which a
	// restart reads (diskqueue.Log.HoldFrom); pressure and timerPressure
	// are their HoldPressure (nil: none). A timer store at MaxDiskBytes
	// refuses a deferral, which then stays in memory or goes to the log,
	// until the store its pressure asks for moves the hold.
	hold          func(st keyFile)
	pressure      <-chan struct{}
	timerPressure <-chan struct{}
	// sync makes the log durable up to its end (diskqueue.Log.Sync), before
	// a state whose watermark is there is stored.
	sync func(ctx context.Context) error
	comp *compactor // nil without compaction
	stop chan struct{}
	done chan struct{}
	last [4]int64
	// next is when the next store may run: a store of a large state
	// waits 20 times what the last one took, so storing takes at most
	// about 5% of the time (and the tail a restart reads grows as much).
	next time.Time
}

func (k *keeper) start() {
	k.stop, k.done = make(chan struct{}), make(chan struct{})
	every := keySaveInterval
	go func() {
		defer close(k.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				if k.state != nil {
					k.save(false)
				}
				if k.comp != nil {
					k.comp.maybeStart()
				}
			case <-k.pressure:
				// A Put waits (or failed) for room the hold keeps: store
				// the state, which moves the hold past what it covers.
				k.save(false)
			case <-k.timerPressure:
				k.save(false)
			case <-k.stop:
				return
			}
		}
	}()
}

// save stores the key state, unless nothing changed since the last time
// (and force is not set).
func (k *keeper) save(force bool) error {
	began := time.Now()
	if !force && began.Before(k.next) {
		return nil
	}
	now := k.changes()
	if !force && now == k.last {
		return nil
	}
	st, ok := k.state()
	if !ok {
		return nil
	}
	// The records below the watermark first: a state stored ahead of the
	// log's last fsync (the default policy fsyncs the log every 2 s, the
	// state about every second) was left, by a power cut, naming records
	// the log no longer had, its watermark past the log's end.
	if err := k.sync(context.Background()); err != nil {
		k.logger.Warn("spillq: cannot fsync the log before storing the key state; a restart reads more of the log to rebuild it", "err", err)
		return err
	}
	if err := saveKeyState(k.dir, k.modes, st); err != nil {
		k.logger.Warn("spillq: cannot store the key state; a restart reads more of the log to rebuild it", "err", err)
		return err
	}
	k.hold(st)
	k.last = now
	k.next = began.Add(20 * time.Since(began))
	return nil
}

// close stops the background work and stores the key state a last time.
func (k *keeper) close() error {
	if k.stop == nil {
		return nil
	}
	close(k.stop)
	<-k.done
	if k.comp != nil {
		k.comp.stop()
	}
	if k.state != nil {
		if err := k.save(true); err != nil {
			return fmt.Errorf("spillq: close: store key state: %w", err)
		}
	}
	return nil
}
