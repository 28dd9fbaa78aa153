package spillq_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// keyModel is what a queue under a key policy must do, in the small: the
// versions put per key, pending or not, in put order.
type keyModel struct {
	policy  channel.KeyPolicy
	pending map[string][]int // key -> versions put and not finished, in order
	seen    map[string]bool  // KeyDedup: keys ever put
	next    int
}

// TestKeyPolicyProperty: random puts over a small key space, receives,
// finishes, requeues, compactions and restarts, under each policy; what
// Put returns and what consumers see must match the model, and once all is
// drained no key is left pending:
//
//   - KeyUnique: Put of a key with a version pending is ErrDuplicate;
//   - KeyReplace: a delivered version is the newest put of its key;
//   - KeyDedup: Put of a key put before is ErrDuplicate (the window is an hour);
//   - KeySerial: never two versions of a key in flight, and each key's
//     versions are finished in put order.
//
// SPILLQ_SEED reproduces a run.
func TestKeyPolicyProperty(t *testing.T) {
	seed := propertySeed()
	steps := 600
	if testing.Short() {
		steps = 200
	}
	for _, policy := range []channel.KeyPolicy{channel.KeyUnique, channel.KeyReplace, channel.KeyDedup, channel.KeySerial} {
		t.Run(policy.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, uint64(policy)))
			t.Logf("SPILLQ_SEED=%d", seed)
			dir := t.TempDir()
			opts := spillq.Options{Keys: policy, DedupWindow: time.Hour, MsgTimeout: time.Hour, Disk: diskqueue.Options{MaxSegmentBytes: 1 << 10}}
			if policy != channel.KeyReplace {
				// Compaction then removes the finished versions a newer one replaced.
				opts.Disk.RetainBytes = 1 << 20
			}
			q := open(t, dir, opts)
			defer func() { q.Close() }()
			model := keyModel{policy: policy, pending: map[string][]int{}, seen: map[string]bool{}}
			var inFlight []*channel.Message
			var removed int64 // by compactions
			ctx := context.Background()
			for step := range steps {
				switch op := rng.IntN(10); {
				case op < 4: // put
					k := fmt.Sprintf("k%d", rng.IntN(5))
					v := model.next
					model.next++
					err := q.PutWith(ctx, []byte(fmt.Sprintf("%s:%d", k, v)), channel.PutOptions{Key: []byte(k)})
					dup := policy == channel.KeyUnique && len(model.pending[k]) > 0 || policy == channel.KeyDedup && model.seen[k]
					if dup != errors.Is(err, channel.ErrDuplicate) || !dup && err != nil {
						t.Fatalf("step %d: Put %s:%d = %v, want duplicate %v (pending %v)", step, k, v, err, dup, model.pending[k])
					}
					if !dup {
						model.pending[k] = append(model.pending[k], v)
						model.seen[k] = true
					}
				case op < 7: // receive
					m, err := q.TryReceive()
					if err != nil {
						continue
					}
					k, v := parseKV(t, m)
					vs := model.pending[k]
					switch policy {
					case channel.KeyReplace:
						if len(vs) == 0 || vs[len(vs)-1] != v {
							t.Fatalf("step %d: delivered %s:%d, newest is %v", step, k, v, vs)
						}
					case channel.KeySerial:
						for _, o := range inFlight {
							if string(o.Key) == k {
								t.Fatalf("step %d: %s:%d delivered with %s in flight", step, k, v, o.Body)
							}
						}
						if len(vs) == 0 || vs[0] != v {
							t.Fatalf("step %d: delivered %s:%d, next in put order is %v", step, k, v, vs)
						}
					}
					inFlight = append(inFlight, m)
				case op < 9 && len(inFlight) > 0: // finish or requeue one in flight
					i := rng.IntN(len(inFlight))
					m := inFlight[i]
					inFlight = append(inFlight[:i], inFlight[i+1:]...)
					if rng.IntN(4) == 0 {
						m.Requeue(0)
						continue
					}
					if err := m.Finish(); err != nil {
						t.Fatalf("step %d: Finish: %v", step, err)
					}
					k, v := parseKV(t, m)
					vs := model.pending[k]
					for j, x := range vs {
						if x == v {
							vs = append(vs[:j:j], vs[j+1:]...)
							break
						}
					}
					if policy == channel.KeyReplace {
						// Finishing the newest ends the older ones, never delivered.
						vs = vs[:0]
						for _, x := range model.pending[k] {
							if x > v {
								vs = append(vs, x)
							}
						}
					}
					model.pending[k] = vs
				case rng.IntN(2) == 0: // compact
					cs, err := q.Compact(ctx)
					if err != nil {
						t.Fatalf("step %d: Compact: %v", step, err)
					}
					removed += cs.Removed
				default: // restart
					if err := q.Close(); err != nil {
						t.Fatalf("step %d: Close: %v", step, err)
					}
					inFlight = nil
					q = open(t, dir, opts)
				}
			}
			// Drained, every key is done: nothing compaction removed
			// stays counted as pending.
			for _, m := range inFlight {
				if err := m.Finish(); err != nil {
					t.Fatal(err)
				}
			}
			drain(t, q, func() int64 { return q.Stats().BackendDepth }, func(m *channel.Message) {
				k, v := parseKV(t, m)
				if vs := model.pending[k]; policy == channel.KeyReplace && (len(vs) == 0 || vs[len(vs)-1] != v) {
					t.Fatalf("drain: delivered %s:%d, newest is %v", k, v, vs)
				}
				if err := m.Finish(); err != nil {
					t.Fatal(err)
				}
			})
			spillq.KeyState(q) // prunes restored entries the floor has passed
			if st := q.Stats(); policy != channel.KeyDedup && (st.KeysPending != 0 || st.KeyWaiting != 0) {
				t.Fatalf("drained: %d keys pending, %d waiting; want none", st.KeysPending, st.KeyWaiting)
			}
			if cs := q.CompactStats(); cs.Err != nil {
				t.Fatalf("compaction: %v", cs.Err)
			}
			t.Logf("compactions removed %d records", removed)
		})
	}
}

// drain receives from ch while depth says records are left, handing each
// message to each, which finishes it. A channel drops superseded versions
// unseen, so Receive may wait in vain once the last were: depth then says
// none are left.
func drain(t *testing.T, ch consumer, depth func() int64, each func(m *channel.Message)) {
	t.Helper()
	for depth() > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		m, err := ch.Receive(ctx)
		cancel()
		if err != nil {
			if depth() == 0 {
				return
			}
			t.Fatalf("drain: Receive: %v; %d left", err, depth())
		}
		each(m)
	}
}

// propertySeed is a property test's seed: SPILLQ_SEED, or the clock.
func propertySeed() uint64 {
	if s, err := strconv.ParseUint(os.Getenv("SPILLQ_SEED"), 10, 64); err == nil {
		return s
	}
	return uint64(time.Now().UnixNano())
}

func parseKV(t *testing.T, m *channel.Message) (string, int) {
	t.Helper()
	k, v, ok := strings.Cut(string(m.Body), ":")
	n, err := strconv.Atoi(v)
	if !ok || err != nil || k != string(m.Key) {
		t.Fatalf("message %q with key %q", m.Body, m.Key)
	}
	return k, n
}

// TestReplaceCloseDropsSuperseded: under KeyReplace, a version held in
// memory at Close that a newer stored one superseded is not stored again
// (where it would sit after the newer), so a restart never delivers it.
func TestReplaceCloseDropsSuperseded(t *testing.T) {
	dir := t.TempDir()
	opts := spillq.Options{Keys: channel.KeyReplace, MemQueueSize: 1}
	q := open(t, dir, opts)
	ctx := context.Background()
	for v := range 2 { // v0 to memory, v1 to disk: the memory buffer is full
		if err := q.PutWith(ctx, []byte(fmt.Sprintf("k:%d", v)), channel.PutOptions{Key: []byte("k")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = open(t, dir, opts)
	defer q.Close()
	drain(t, q, func() int64 { return q.Stats().BackendDepth }, func(m *channel.Message) {
		if _, v := parseKV(t, m); v != 1 {
			t.Fatalf("delivered %q after a restart; k:1 superseded it", m.Body)
		}
		m.Finish()
		spillq.KeyState(q) // prunes what the floor has passed
	})
	if st := q.Stats(); st.KeysPending != 0 {
		t.Fatalf("%d keys pending after the drain", st.KeysPending)
	}
}

// TestSerialCloseWithMemory: under KeySerial a keyed message held in the
// memory buffer goes to the backend at Close, and comes back after it.
func TestSerialCloseWithMemory(t *testing.T) {
	dir := t.TempDir()
	opts := spillq.Options{Keys: channel.KeySerial, MemQueueSize: 16}
	q := open(t, dir, opts)
	ctx := context.Background()
	if err := q.PutWith(ctx, []byte("k:0"), channel.PutOptions{Key: []byte("k")}); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = open(t, dir, opts)
	defer q.Close()
	m, err := q.Receive(ctx)
	if err != nil || string(m.Body) != "k:0" || string(m.Key) != "k" {
		t.Fatalf("after the restart: %v, %v", m, err)
	}
	m.Finish()
}

// TestKeyPolicyChangedBetweenOpens: a queue reopened under another key
// policy rebuilds the new policy's state from the records not yet
// acknowledged, as docs/keys.md says (a user's trial found it undocumented):
// what the old policy decided stands, what it would still have done does
// not. Under a former KeyReplace the superseded version not yet reached is
// delivered, and under KeyUnique its key is pending.
func TestKeyPolicyChangedBetweenOpens(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	q := open(t, dir, spillq.Options{Keys: channel.KeyReplace})
	for _, v := range []string{"v1", "v2"} {
		if err := q.PutWith(ctx, []byte(v), channel.PutOptions{Key: []byte("k")}); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = open(t, dir, spillq.Options{Keys: channel.KeyUnique})
	defer q.Close()
	if err := q.PutWith(ctx, []byte("v3"), channel.PutOptions{Key: []byte("k")}); !errors.Is(err, channel.ErrDuplicate) {
		t.Errorf("Put under KeyUnique of a key two records of which are pending: %v, want ErrDuplicate", err)
	}
	var got []string
	for range 2 {
		m, err := q.Receive(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(m.Body))
		m.Finish()
	}
	if fmt.Sprint(got) != "[v1 v2]" {
		t.Errorf("delivered %v under KeyUnique after KeyReplace, want [v1 v2]", got)
	}
	if err := q.PutWith(ctx, []byte("v4"), channel.PutOptions{Key: []byte("k")}); err != nil {
		t.Errorf("Put once both were finished: %v", err)
	}
}
