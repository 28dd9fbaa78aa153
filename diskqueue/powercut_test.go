package diskqueue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestPowerCutAtEverySync cuts the power at every fsync and directory
// fsync that changed what a disk would keep, over a workload of concurrent
// producers (calling Sync now and then), a consumer that acknowledges out
// of order and holds some records back (so segments are deleted whole and
// behind older unacknowledged ones), and clean restarts in between. Every
// cut is the durable state from that sync until the next one; for each,
// a queue opened on it must
//
//   - hold every record the sync policy promised by the end of that
//     stretch: with SyncEvery 1, every Put that returned; under any policy,
//     every Put that returned before a Sync or Close that returned, and
//     every record below the synced mark (syncedSeq) read meanwhile; and
//     deliver each of them unless its Ack had begun before the cut;
//   - not deliver again a record whose Ack returned before a later fsync
//     of its segment's acknowledgement file, or before a Close;
//   - serve only bodies that were put, in seq order, each producer's
//     records in its order, and keep of each producer's records a prefix
//     (less acknowledged ones): no record is lost while a later one of the
//     same producer survives;
//   - take new records as any other (putAfterCut): delivered after a
//     restart, their Acks counted.
//
// It also fails on the bugs it found, each fixed and pinned by a test of
// its concept: records a cut lost that were never promised reported as
// damage (Open took a segment rotated out and never fsynced for a sealed
// one: TestPowerCutLostRecordsAreNotDamage); an acknowledgement fsynced and
// lost with its bitmap file, made after the directory fsync covering its
// segment (TestAckFileMadeAfterItsSegmentIsDurable); and a reader left in a
// segment deleted under it (when an Ack moves the floor over records
// acknowledged before a restart) delivering those again from its buffer
// (TestReadInDeletedSegmentRedeliversNothing), or failing every Read
// (ErrNotFound) until the next Open (TestFirstReadAfterOpenWhileDeleting). A cut after which the queue reports
// damage fails at once, with its files and the warnings Open logged.
//
// It runs on the write(2) path and (on Linux) the mapped one, under
// SyncEvery 1, the default policy, and SyncEvery 7 with a 1ms interval
// (acknowledgements and the cursor fsynced on the tick). -short checks a
// sample of about 60 cuts of each.
func TestPowerCutAtEverySync(t *testing.T) {
	t.Parallel() // self-contained: its own directories and file systems, no process-wide counts
	policies := []struct {
		name string
		opts Options
	}{
		{"sync1", Options{SyncEvery: 1}},
		{"default", Options{}},
		{"every7", Options{SyncEvery: 7, SyncInterval: time.Millisecond}},
	}
	for _, kind := range memFSKinds() {
		for _, pol := range policies {
			t.Run(kind.name+"/"+pol.name, func(t *testing.T) {
				seed := uint64(time.Now().UnixNano())
				t.Logf("seed %d", seed)
				h := newCutHarness(t, kind, pol.opts, seed)
				h.run()
				h.checkCuts()
			})
		}
	}
}

const (
	pcProducers = 2
	pcMaxPuts   = 1 << 12 // per producer; ids are p*pcMaxPuts + i
	pcDir       = "/q"
)

// pcBody is producer p's i'th record: derived from (p, i) alone, so a body
// read back tells whose it is and whether it is intact.
func pcBody(p, i int) []byte {
	head := fmt.Sprintf("%d-%d-", p, i)
	return []byte(head + strings.Repeat(string(rune('a'+(p*7+i)%26)), (i*37+p*11)%150))
}

func parsePCBody(b []byte) (id int, ok bool) {
	parts := strings.SplitN(string(b), "-", 3)
	if len(parts) != 3 {
		return 0, false
	}
	p, err1 := strconv.Atoi(parts[0])
	i, err2 := strconv.Atoi(parts[1])
	if err1 != nil || err2 != nil || p < 0 || p >= pcProducers || i < 0 || i >= pcMaxPuts {
		return 0, false
	}
	return p*pcMaxPuts + i, bytes.Equal(pcBody(p, i), b)
}

// powerCut is the durable state from one sync until the next.
type powerCut struct {
	ticket int64  // when it began (the sync that made it)
	what   string // that sync
	fs     *memFS
	// synced is the highest syncedSeq seen while it or an earlier cut
	// was the durable state: every record below it was on stable storage.
	synced uint64
}

// pcRecord is what the workload did with one record, as tickets (see
// cutHarness.observe); 0 is never.
type pcRecord struct {
	putRet   int64 // after its Put returned
	promised int64 // after a Sync or Close returned that began after putRet (or putRet, with SyncEvery 1)
	ackStart int64 // before its first Ack
	ackRet   int64 // after its first Ack returned
	ackKept  int64 // after a Close returned that began after ackRet
	seq      uint64
	seg      uint64 // base of its segment
	read     bool   // seq and seg are known
}

// cutHarness runs the workload on a memFS that makes a powerCut at every
// sync, and records on one clock (tickets, under the memFS lock, ordered
// against every sync) when each Put, Sync, Ack and Close began or ended.
type cutHarness struct {
	t     *testing.T
	kind  memFSKind
	opts  Options
	fs    *memFS
	rng   *rand.Rand
	q     atomic.Pointer[Queue]
	short bool

	// Under fs.mu.
	ticket int64
	cuts   []powerCut
	syncs  map[string][]int64 // tickets of every fsync of each file
	synced uint64

	mu       sync.Mutex // guards recs, returned and puts
	recs     map[int]*pcRecord
	returned []int            // ids in the order their Puts returned
	puts     [pcProducers]int // Puts each producer began
	failed   atomic.Bool
	// redelivered counts records delivered again, after their Ack
	// returned and a clean restart, from a segment deleted under the
	// reader (see consume).
	redelivered int
	stuck       int // readers stuck in a deleted segment (see consume)

	damaged     int // cuts checked after which the queue reported damage
	ackFileLost int // acknowledgements fsynced whose bitmap a cut left out of the directory
}

func newCutHarness(t *testing.T, kind memFSKind, opts Options, seed uint64) *cutHarness {
	h := &cutHarness{
		t: t, kind: kind, fs: kind.new(t), rng: rand.New(rand.NewPCG(seed, 7)), short: testing.Short(),
		syncs: map[string][]int64{}, recs: map[int]*pcRecord{},
	}
	opts.MaxSegmentBytes = 700
	opts.MaxRecordBytes = 256
	opts.FS = h.fs
	h.opts = opts
	h.fs.MkdirAll(pcDir, 0o755)
	h.cuts = []powerCut{{what: "start", fs: h.fs.CrashClone()}}
	h.fs.OnSync = h.onSync
	return h
}

// onSync runs under fs.mu at every sync: a changed durable state is a new
// cut.
func (h *cutHarness) onSync(op, name string, changed bool) {
	h.noteSyncedLocked()
	h.ticket++
	if op == "fsync" {
		h.syncs[name] = append(h.syncs[name], h.ticket)
	}
	if changed {
		h.cuts = append(h.cuts, powerCut{ticket: h.ticket, what: op + " " + filepath.Base(name), fs: h.fs.CrashCloneLocked(), synced: h.synced})
	}
}

// noteSyncedLocked raises the current cut's synced mark to what the queue
// says is on stable storage now.
func (h *cutHarness) noteSyncedLocked() {
	if q := h.q.Load(); q != nil {
		h.synced = max(h.synced, q.syncedSeq.Load())
		h.cuts[len(h.cuts)-1].synced = h.synced
	}
}

// observe returns a ticket: the event before it happened before every
// cut made after it, the event after it after every cut made before it.
func (h *cutHarness) observe() int64 {
	var tk int64
	h.fs.Locked(func() {
		h.noteSyncedLocked()
		h.ticket++
		tk = h.ticket
	})
	return tk
}

// cutAt is the index of the cut that was the durable state at ticket tk.
func (h *cutHarness) cutAt(tk int64) int {
	return sort.Search(len(h.cuts), func(i int) bool { return h.cuts[i].ticket > tk }) - 1
}

func (h *cutHarness) rec(id int) *pcRecord {
	r := h.recs[id]
	if r == nil {
		r = &pcRecord{}
		h.recs[id] = r
	}
	return r
}

func (h *cutHarness) fatalf(format string, args ...any) {
	h.failed.Store(true)
	h.t.Helper()
	h.t.Errorf(format, args...)
	runtime.Goexit()
}

// run is the workload: phases of concurrent puts and reads, each ended by
// a clean Close and the next Open; then a last Open that drains the queue.
func (h *cutHarness) run() {
	phases, perPhase := 4, 30
	if h.short {
		phases, perPhase = 3, 16
	}
	for phase := 0; phase < phases && !h.t.Failed(); phase++ {
		q := h.open()
		var wg sync.WaitGroup
		var producing atomic.Int32
		producing.Store(pcProducers)
		for p := 0; p < pcProducers; p++ {
			seed := h.rng.Uint64()
			wg.Go(func() {
				defer producing.Add(-1)
				h.produce(q, p, perPhase+int(seed%8), rand.New(rand.NewPCG(seed, 1)))
			})
		}
		seed := h.rng.Uint64()
		wg.Go(func() { h.consume(q, &producing, rand.New(rand.NewPCG(seed, 2)), false) })
		wg.Wait()
		if h.t.Failed() {
			q.Close()
			return
		}
		h.close(q)
	}
	if h.t.Failed() {
		return
	}
	// The last Open: every record whose Put returned and whose Ack did not
	// is delivered; then all are acknowledged.
	q := h.open()
	var none atomic.Int32
	for try := 0; h.consume(q, &none, rand.New(rand.NewPCG(h.rng.Uint64(), 3)), true); try++ {
		if h.t.Failed() || try == 5 {
			q.Close()
			h.t.Fatalf("the reader is stuck after %d restarts", try)
		}
		h.close(q)
		q = h.open()
	}
	if h.t.Failed() {
		q.Close()
		return
	}
	h.mu.Lock()
	for _, id := range h.returned {
		if r := h.recs[id]; r.ackRet == 0 {
			h.mu.Unlock()
			q.Close()
			h.t.Fatalf("record %s was put and never delivered", pcName(id))
		}
	}
	h.mu.Unlock()
	if d := q.Depth(); d != 0 {
		st := q.Stats()
		q.Close()
		h.t.Fatalf("everything delivered and acknowledged, and Depth is %d; queue %+v\nfiles: %s", d, st, listing(h.fs, pcDir))
	}
	h.close(q)
	h.t.Logf("%d records put, %d cuts", len(h.returned), len(h.cuts))
}

func pcName(id int) string { return fmt.Sprintf("%d-%d", id/pcMaxPuts, id%pcMaxPuts) }

func (h *cutHarness) open() *Queue {
	h.t.Helper()
	q, err := Open(pcDir, h.opts)
	if err != nil {
		h.t.Fatalf("open: %v", err)
	}
	if got := q.Stats().WritePath; got != h.kind.path {
		q.Close()
		h.t.Fatalf("the queue writes with %q, want %q", got, h.kind.path)
	}
	h.q.Store(q)
	return q
}

// close closes q cleanly: what was put and acknowledged before is then
// durable.
func (h *cutHarness) close(q *Queue) {
	h.t.Helper()
	h.mu.Lock()
	n := len(h.returned)
	var acked []int
	for id, r := range h.recs {
		if r.ackRet != 0 {
			acked = append(acked, id)
		}
	}
	h.mu.Unlock()
	if err := q.Close(); err != nil {
		h.t.Fatalf("close: %v", err)
	}
	tk := h.observe()
	h.mu.Lock()
	h.promiseLocked(n, tk)
	for _, id := range acked {
		if r := h.recs[id]; r.ackKept == 0 {
			r.ackKept = tk
		}
	}
	h.mu.Unlock()
}

// promiseLocked records that the first n Puts to return are durable from
// ticket tk on.
func (h *cutHarness) promiseLocked(n int, tk int64) {
	for _, id := range h.returned[:n] {
		if r := h.recs[id]; r.promised == 0 {
			r.promised = tk
		}
	}
}

func (h *cutHarness) produce(q *Queue, p, n int, rng *rand.Rand) {
	ctx := context.Background()
	for k := 0; k < n && !h.failed.Load(); k++ {
		h.mu.Lock()
		i := h.puts[p]
		h.puts[p]++
		h.mu.Unlock()
		id := p*pcMaxPuts + i
		if err := q.Put(ctx, pcBody(p, i)); err != nil {
			h.fatalf("put %s: %v", pcName(id), err)
		}
		tk := h.observe()
		h.mu.Lock()
		r := h.rec(id)
		r.putRet = tk
		if q.syncAlways {
			r.promised = tk
		}
		h.returned = append(h.returned, id)
		h.mu.Unlock()
		if rng.IntN(10) == 0 {
			h.mu.Lock()
			n := len(h.returned)
			h.mu.Unlock()
			if err := q.Sync(ctx); err != nil {
				h.fatalf("sync: %v", err)
			}
			tk := h.observe()
			h.mu.Lock()
			h.promiseLocked(n, tk)
			h.mu.Unlock()
		}
	}
}

// consume reads and acknowledges: in batches, in random order, holding
// some records back for the rest of the phase and leaving some
// unacknowledged at its end (delivered again after the next Open). drain
// acknowledges everything, and stops when the queue is empty.
func (h *cutHarness) consume(q *Queue, producing *atomic.Int32, rng *rand.Rand, drain bool) (stuck bool) {
	var batch, held []Record
	ack := func(recs []Record) {
		for _, rec := range recs {
			id, _ := parsePCBody(rec.Body)
			tk := h.observe()
			h.mu.Lock()
			if r := h.recs[id]; r.ackStart == 0 {
				r.ackStart = tk
			}
			h.mu.Unlock()
			if err := q.Ack(rec.Seq); err != nil {
				h.fatalf("ack %d (%s): %v", rec.Seq, pcName(id), err)
			}
			tk = h.observe()
			h.mu.Lock()
			if r := h.recs[id]; r.ackRet == 0 {
				r.ackRet = tk
			}
			h.mu.Unlock()
		}
	}
	for !h.failed.Load() {
		stop := producing.Load() == 0
		ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
		if stop {
			cancel() // take what is ready, then stop
		}
		rec, err := q.Read(ctx)
		cancel()
		if errors.Is(err, ErrNotFound) {
			// A bug TestFirstReadAfterOpenWhileDeleting pins (fixed; counted, and failed at the end): when acknowledging
			// moves the floor over records acknowledged before a restart,
			// the writer may delete the segment the reader is in, and a
			// reader caught mid-segment fails every Read from then on
			// (ErrNotFound: the segment was deleted). Stop; the next Open
			// delivers what is left.
			h.mu.Lock()
			h.stuck++
			h.mu.Unlock()
			h.t.Errorf("live, Read failed with %v; queue %+v", err, q.Stats())
			stuck = true
			break
		}
		if err != nil {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				h.fatalf("read: %v", err)
			}
			if stop {
				break
			}
			continue
		}
		id, ok := parsePCBody(rec.Body)
		if !ok {
			h.fatalf("read seq %d: %q, which nobody put", rec.Seq, rec.Body)
		}
		seg := q.segmentAt(rec.Seq)
		deleted := inDeletedSegment(q, rec.Seq)
		h.mu.Lock()
		r := h.recs[id]
		switch {
		case r != nil && r.ackRet != 0 && deleted:
			// A bug TestReadInDeletedSegmentRedeliversNothing pins (fixed; counted, and failed at the end): after a restart
			// the reader can still be in a segment the writer deleted
			// (the floor passed records acknowledged before the restart)
			// and hands out those records again from its buffer, having
			// made the deleted segment a new, empty acknowledgement file.
			h.redelivered++
			h.mu.Unlock()
			continue
		case r == nil:
			// Its Put has not returned yet; it still cannot be acked
			// before it has (that waits for this bookkeeping).
			r = h.rec(id)
		case r.ackRet != 0:
			h.mu.Unlock()
			h.fatalf("record %s (seq %d) delivered again after its Ack returned and the queue was closed", pcName(id), rec.Seq)
		case r.read && r.seq != rec.Seq:
			h.mu.Unlock()
			h.fatalf("record %s read at seq %d, before at %d", pcName(id), rec.Seq, r.seq)
		}
		r.seq, r.read = rec.Seq, true
		if seg != nil {
			r.seg = seg.base
		}
		h.mu.Unlock()
		if !drain && rng.IntN(12) == 0 {
			held = append(held, rec) // acknowledged at the end of the phase, if at all
			continue
		}
		batch = append(batch, rec)
		if len(batch) >= 1+rng.IntN(6) {
			rng.Shuffle(len(batch), func(i, j int) { batch[i], batch[j] = batch[j], batch[i] })
			ack(batch)
			batch = batch[:0]
		}
	}
	if drain {
		ack(batch)
		return stuck
	}
	// Leave a few of each unacknowledged, for the next Open to deliver again.
	rng.Shuffle(len(held), func(i, j int) { held[i], held[j] = held[j], held[i] })
	ack(held[:len(held)/2])
	ack(batch[:len(batch)/2])
	return stuck
}

// checkCuts opens every cut (-short: a sample) and checks it.
func (h *cutHarness) checkCuts() {
	if h.t.Failed() {
		return
	}
	n, checked := len(h.cuts), 0
	start := time.Now()
	for k := range h.cuts {
		if h.short && n > 60 && k != n-1 && h.rng.IntN(n) >= 60 {
			continue
		}
		h.checkCut(k)
		checked++
		if h.t.Failed() {
			return
		}
	}
	h.t.Logf("checked %d of %d cuts in %v", checked, n, time.Since(start).Round(time.Millisecond))
	// The bugs named in the test's comment, each fixed: none may come back.
	if h.damaged+h.ackFileLost+h.redelivered+h.stuck > 0 {
		h.t.Errorf("%d cuts reported damage, %d lost fsynced acknowledgements with their bitmap's name; %d acknowledged records delivered again from deleted segments, %d readers stuck in one, live and after the cuts",
			h.damaged, h.ackFileLost, h.redelivered, h.stuck)
	}
}

func (h *cutHarness) checkCut(k int) {
	t := h.t
	t.Helper()
	cut := h.cuts[k]
	defer cut.fs.Release()
	var logs lockedBuffer // the checked queue's writer goroutine logs too
	opts := h.opts
	opts.FS = cut.fs
	opts.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	where := fmt.Sprintf("power cut %d of %d (after %s)", k, len(h.cuts), cut.what)
	listing := listing(cut.fs, pcDir) // before Open changes anything
	names := map[string]bool{}
	for _, name := range cut.fs.Files() {
		names[name] = true
	}
	failf := func(format string, args ...any) {
		t.Helper()
		t.Errorf("%s: %s\nfiles at the cut: %s\nwarnings after it:\n%s", where, fmt.Sprintf(format, args...), listing, logs.String())
	}
	// At this cut a record may be gone for its acknowledgement if its Ack
	// began before the cut was made.
	mayBeAcked := func(r *pcRecord) bool { return r.ackStart != 0 && r.ackStart < cut.ticket }
	promised := func(r *pcRecord) bool { return r.promised != 0 && h.cutAt(r.promised) <= k }
	// ackKept says why a record's acknowledgement is durable at this cut,
	// or "".
	ackKept := func(r *pcRecord) string {
		if r.ackRet == 0 {
			return ""
		}
		if r.ackKept != 0 && h.cutAt(r.ackKept) <= k {
			return fmt.Sprintf("a Close returned at ticket %d", r.ackKept)
		}
		if !r.read {
			return ""
		}
		name := segmentName(r.seg, ackSuffix)
		syncs := h.syncs[filepath.Join(pcDir, name)]
		i := sort.Search(len(syncs), func(i int) bool { return syncs[i] > r.ackRet })
		if i < len(syncs) && h.cutAt(syncs[i]) <= k {
			return fmt.Sprintf("%s was fsynced at ticket %d", name, syncs[i])
		}
		return ""
	}

	// What is on disk: bodies that were put, in order, nothing corrupt.
	// A read-only view, which deletes nothing while it is scanned.
	ro, err := OpenReadOnly(pcDir, opts)
	if err != nil {
		failf("open read-only: %v", err)
		return
	}
	defer ro.Close()
	st := ro.Stats()
	present := map[int]uint64{}
	var last [pcProducers]int
	for p := range last {
		last[p] = -1
	}
	prev := int64(-1)
	var damage []string // what reported damage, for the failure
	for rec, err := range ro.Scan(st.FirstSeq, math.MaxUint64) {
		if errors.Is(err, ErrCorrupt) {
			// What was promised must still be delivered, as checked
			// below, so the scan goes on.
			damage = append(damage, fmt.Sprintf("scan: %v", err))
			continue
		}
		if err != nil {
			failf("scan: %v", err)
			return
		}
		id, ok := parsePCBody(rec.Body)
		if !ok {
			failf("seq %d holds %q, which nobody put", rec.Seq, rec.Body)
			return
		}
		r := h.recs[id]
		switch p, i := id/pcMaxPuts, id%pcMaxPuts; {
		case int64(rec.Seq) <= prev:
			failf("seq %d after seq %d", rec.Seq, prev)
		case r != nil && r.read && r.seq != rec.Seq:
			failf("record %s is at seq %d; it was read at %d", pcName(id), rec.Seq, r.seq)
		case i <= last[p]:
			failf("record %s at seq %d comes after %s", pcName(id), rec.Seq, pcName(p*pcMaxPuts+last[p]))
		default:
			prev, last[p] = int64(rec.Seq), i
			present[id] = rec.Seq
			continue
		}
		return
	}
	ro.Close()
	// What is delivered.
	delivered := map[int]bool{}
	bySeq := map[uint64]int{}
	fromDeleted := map[int]bool{} // read from a segment deleted under the reader
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for try := 0; ; try++ {
		q, err := Open(pcDir, opts)
		if err != nil {
			failf("open: %v", err)
			return
		}
		if got := q.Stats().WritePath; got != h.kind.path {
			q.Close()
			failf("the queue writes with %q, want %q", got, h.kind.path)
			return
		}
		// Let the writer delete what the floor Open found leaves behind
		// before reading: reads must cope with that too.
		if err := q.Sync(context.Background()); err != nil {
			q.Close()
			failf("sync: %v", err)
			return
		}
		stuck := false
		for {
			rec, err := q.Read(done)
			if errors.Is(err, ErrNotFound) {
				stuck = true // see consume; the next Open goes on
				break
			}
			if err != nil {
				if !errors.Is(err, context.Canceled) {
					q.Close()
					failf("read: %v", err)
					return
				}
				break
			}
			id, _ := parsePCBody(rec.Body)
			if seq, ok := present[id]; !ok || seq != rec.Seq || (delivered[id] && try == 0) {
				q.Close()
				failf("read %s at seq %d, which Scan did not show there (or twice)", pcName(id), rec.Seq)
				return
			}
			delivered[id] = true
			bySeq[rec.Seq] = id
			if inDeletedSegment(q, rec.Seq) {
				fromDeleted[id] = true
			}
		}
		if n := q.Stats().CorruptRecords; n > 0 {
			damage = append(damage, fmt.Sprintf("the queue counted %d corrupt records (open %d)", n, try))
		}
		q.Close()
		if !stuck {
			break
		}
		h.stuck++
		if try == 4 {
			failf("the reader is stuck after %d restarts", try)
			return
		}
	}
	if len(damage) > 0 {
		h.damaged++
		if h.damaged == 1 {
			failf("the queue reports damage:\n%s", strings.Join(damage, "\n"))
		}
	}
	for id, r := range h.recs {
		switch _, there := present[id]; {
		case promised(r) && !mayBeAcked(r) && !delivered[id]:
			failf("record %s (put at ticket %d, promised durable at %d, ack begun at %d) is lost: it is %s", pcName(id), r.putRet, r.promised, r.ackStart, map[bool]string{true: "on disk, not delivered", false: "not on disk"}[there])
			return
		case ackKept(r) != "" && delivered[id]:
			if fromDeleted[id] {
				h.redelivered++ // see consume
				continue
			}
			if !names[filepath.Join(pcDir, segmentName(r.seg, ackSuffix))] {
				// A bug TestAckFileMadeAfterItsSegmentIsDurable pins (fixed; counted, and failed at the end): the bitmap
				// was fsynced, but made after its segment's directory
				// fsync and never covered by one (syncAcks does none).
				h.ackFileLost++
				continue
			}
			failf("record %s (seq %d) is delivered again, though its Ack returned at ticket %d and then %s", pcName(id), r.seq, r.ackRet, ackKept(r))
			return
		}
	}
	// Every record below the synced mark is delivered, unless its Ack began.
	bySeqLive := map[uint64]*pcRecord{}
	for _, r := range h.recs {
		if r.read {
			bySeqLive[r.seq] = r
		}
	}
	for seq := uint64(0); seq < cut.synced; seq++ {
		if _, ok := bySeq[seq]; ok {
			continue
		}
		if r := bySeqLive[seq]; r == nil || !mayBeAcked(r) {
			failf("record at seq %d, below the synced mark %d, is not delivered", seq, cut.synced)
			return
		}
	}
	// Each producer's records on disk are a prefix of what it put, less
	// the ones acknowledged.
	for p, i := range last {
		for j := 0; j < i; j++ {
			id := p*pcMaxPuts + j
			if _, there := present[id]; there {
				continue
			}
			if r := h.recs[id]; r == nil || !mayBeAcked(r) {
				failf("record %s is on disk, the earlier %s (not acknowledged) is not", pcName(p*pcMaxPuts+i), pcName(id))
				return
			}
		}
	}
	h.putAfterCut(opts, failf)
}

// putAfterCut checks that the queue a cut left takes new records as any
// other: put, they are delivered after a restart and their Acks count,
// also after the next (a state the cut left, such as a bit of a lost
// record's bitmap, must not take them for acknowledged, nor their seqs
// for another record's).
func (h *cutHarness) putAfterCut(opts Options, failf func(format string, args ...any)) {
	ctx := context.Background()
	done, cancel := context.WithCancel(ctx)
	cancel()
	const fresh = 3
	body := func(i int) []byte { return []byte(fmt.Sprintf("after-the-cut-%d", i)) }
	q, err := Open(pcDir, opts)
	if err != nil {
		failf("open to put after the cut: %v", err)
		return
	}
	seqs := map[uint64]int{}
	for i := range fresh {
		seq, err := q.Log.PutSeq(ctx, body(i))
		if err != nil {
			q.Close()
			failf("put after the cut: %v", err)
			return
		}
		seqs[seq] = i
	}
	if err := q.Close(); err != nil {
		failf("close after putting after the cut: %v", err)
		return
	}
	for round := range 2 {
		q, err = Open(pcDir, opts)
		if err != nil {
			failf("open after putting after the cut: %v", err)
			return
		}
		got := 0
		for {
			rec, err := q.Read(done)
			if err != nil {
				break
			}
			i, ok := seqs[rec.Seq]
			if !ok {
				continue // an older record, checked above
			}
			if !bytes.Equal(rec.Body, body(i)) {
				q.Close()
				failf("seq %d, put after the cut as %q, holds %q", rec.Seq, body(i), rec.Body)
				return
			}
			got++
			if round == 0 {
				if err := q.Ack(rec.Seq); err != nil {
					q.Close()
					failf("Ack of seq %d, put after the cut and read: %v", rec.Seq, err)
					return
				}
			}
		}
		if err := q.Close(); err != nil {
			failf("close: %v", err)
			return
		}
		if want := []int{fresh, 0}[round]; got != want {
			failf("%d of the %d records put after the cut delivered after a restart (%s), want %d", got, fresh, []string{"before their Acks", "after their Acks"}[round], want)
			return
		}
	}
}

// listing describes dir's files: name and size.
func listing(m *memFS, dir string) string {
	entries, err := m.ReadDir(dir)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range entries {
		info, _ := e.Info()
		fmt.Fprintf(&b, "\n\t%s %d", e.Name(), info.Size())
	}
	return b.String()
}

// lockedBuffer is a bytes.Buffer safe for a logger writing from several
// goroutines while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// inDeletedSegment reports whether seq's segment is deleted (or going).
func inDeletedSegment(q *Queue, seq uint64) bool {
	seg := q.segmentAt(seq)
	if seg == nil {
		return true
	}
	seg.filesMu.Lock()
	defer seg.filesMu.Unlock()
	return seg.closed
}
