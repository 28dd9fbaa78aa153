package diskqueue

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/spillq/spillq/internal/vfs"
)

// memFS is the crash-simulating file system of internal/vfs (see
// vfs.MemFS): a power cut (CrashClone) keeps only what was fsynced.
// newMemFS's files cannot be mapped, so a queue on it takes the write(2)
// path; on Linux newMappedMemFS (memfs_linux_test.go) keeps each file in
// a memfd, so a queue on it takes the mapped path as on a real disk: the
// fsync ordering (sealing, directory syncs, group commit, the cursor) is
// the same code on both paths, the appends and acknowledgements are not.
type memFS = vfs.MemFS

func newMemFS() *memFS { return vfs.NewCrashableMem() }

// memFSKind is a flavour of memFS to run a test on (memFSKinds): new
// makes one, and path is the WritePath a queue on it reports.
type memFSKind struct {
	name string
	new  func(testing.TB) *memFS
	path string
}

// TestPowerCutAtEveryStep runs a workload (puts across many small
// segments, reads and acknowledgements, so rotation, sealing and deletion
// all happen) and after every step cuts the power: a queue opened on what
// was durable at that moment must hold every record the sync policy
// promised. With SyncEvery 1 that is every Put that returned; with the
// default policy, every record below the synced mark at the cut. Nothing
// served may be a body nobody put, and seqs stay in order. It runs on the
// write(2) path and (on Linux) the mapped one.
func TestPowerCutAtEveryStep(t *testing.T) {
	for _, kind := range memFSKinds() {
		for _, c := range []struct {
			name string
			opts Options
		}{
			{"sync1", Options{SyncEvery: 1, MaxSegmentBytes: 512}},
			{"default", Options{MaxSegmentBytes: 512, SyncEvery: 7, SyncInterval: time.Millisecond}},
		} {
			t.Run(kind.name+"/"+c.name, func(t *testing.T) {
				steps := 300
				if testing.Short() {
					steps = 120
				}
				mfs := kind.new(t)
				dir := "/q"
				opts := c.opts
				opts.FS = mfs
				q, err := Open(dir, opts)
				if err != nil {
					t.Fatal(err)
				}
				defer q.Close()
				if got := q.Stats().WritePath; got != kind.path {
					t.Fatalf("a queue on this memFS writes with %q, want %q", got, kind.path)
				}
				ctx := context.Background()
				rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
				var put [][]byte // put[seq] is the body Put returned for
				done, cancel := context.WithCancel(ctx)
				cancel()
				for step := 0; step < steps; step++ {
					switch rng.IntN(4) {
					case 0, 1:
						body := []byte(fmt.Sprintf("step-%d-%s", step, strings.Repeat("x", rng.IntN(40))))
						if err := q.Put(ctx, body); err != nil {
							t.Fatal(err)
						}
						put = append(put, body)
					case 2:
						if rec, err := q.Read(done); err == nil {
							q.Ack(rec.Seq)
						}
					case 3:
						if rng.IntN(4) == 0 {
							q.Sync(ctx)
						}
					}
					promised := uint64(len(put))
					if opts.SyncEvery != 1 {
						promised = q.syncedSeq.Load()
					}
					floor := q.c.ackFloor.Load()
					checkAfterPowerCut(t, step, mfs.CrashClone(), dir, kind, c.opts, put, min(floor, promised), promised)
				}
			})
		}
	}
}

// checkAfterPowerCut opens the durable state and checks that every record
// in [from, promised) is there with its body, and that nothing else served
// is a body nobody put.
func checkAfterPowerCut(t *testing.T, step int, clone *memFS, dir string, kind memFSKind, opts Options, put [][]byte, from, promised uint64) {
	t.Helper()
	defer clone.Release()
	opts.FS = clone
	q, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("step %d: open after a power cut: %v", step, err)
	}
	defer q.Close()
	st := q.Stats()
	if st.WritePath != kind.path {
		t.Fatalf("step %d: after a power cut the queue writes with %q, want %q", step, st.WritePath, kind.path)
	}
	if st.WriteSeq < promised {
		t.Fatalf("step %d: after a power cut the log ends at %d; %d records were promised durable", step, st.WriteSeq, promised)
	}
	for seq := from; seq < promised; seq++ {
		rec, err := q.ReadAt(seq)
		if err != nil {
			if seq < st.FirstSeq {
				continue // acknowledged and deleted before the cut
			}
			t.Fatalf("step %d: durable record %d: %v (stats %+v)", step, seq, err, st)
		}
		if string(rec.Body) != string(put[seq]) {
			t.Fatalf("step %d: record %d is %q, put %q", step, seq, rec.Body, put[seq])
		}
	}
	for seq := st.FirstSeq; seq < st.WriteSeq; seq++ {
		rec, err := q.ReadAt(seq)
		if err != nil {
			continue // lost in the cut (not promised) or acknowledged and deleted
		}
		if seq >= uint64(len(put)) || string(rec.Body) != string(put[seq]) {
			t.Fatalf("step %d: after a power cut seq %d holds %q, which nobody put there", step, seq, rec.Body)
		}
	}
}
