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
// finishes, requeues and restarts, under each policy; what Put returns and
// what consumers see must match the model:
//
//   - KeyUnique: Put of a key with a version pending is ErrDuplicate;
//   - KeyReplace: a delivered version is the newest put of its key;
//   - KeyDedup: Put of a key put before is ErrDuplicate (the window is an hour);
//   - KeySerial: never two versions of a key in flight, and each key's
//     versions are finished in put order.
//
// SPILLQ_SEED reproduces a run.
func TestKeyPolicyProperty(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("SPILLQ_SEED"), 10, 64); err == nil {
		seed = s
	}
	steps := 600
	if testing.Short() {
		steps = 200
	}
	for _, policy := range []channel.KeyPolicy{channel.KeyUnique, channel.KeyReplace, channel.KeyDedup, channel.KeySerial} {
		t.Run(policy.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, uint64(policy)))
			t.Logf("SPILLQ_SEED=%d", seed)
			dir := t.TempDir()
			opts := spillq.Options{Keys: policy, DedupWindow: time.Hour, MsgTimeout: time.Hour, Disk: diskqueue.Options{MaxSegmentBytes: 4 << 10}}
			q := open(t, dir, opts)
			defer func() { q.Close() }()
			model := keyModel{policy: policy, pending: map[string][]int{}, seen: map[string]bool{}}
			var inFlight []*channel.Message
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
					done, cancel := context.WithCancel(ctx)
					cancel()
					m, err := q.Receive(done)
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
				default: // restart
					if err := q.Close(); err != nil {
						t.Fatalf("step %d: Close: %v", step, err)
					}
					inFlight = nil
					q = open(t, dir, opts)
				}
			}
		})
	}
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

// TestCompactReplace: under KeyReplace, Compact removes from sealed
// segments the versions a newer stored one superseded, and nothing else;
// consumers see the same thing before and after, a removed seq is
// ErrCompacted, and a restart changes nothing.
func TestCompactReplace(t *testing.T) {
	dir := t.TempDir()
	opts := spillq.Options{Keys: channel.KeyReplace, Disk: diskqueue.Options{MaxSegmentBytes: 4 << 10}}
	q := open(t, dir, opts)
	ctx := context.Background()
	const keys, versions = 50, 3
	for v := range versions {
		for k := range keys {
			if err := q.PutWith(ctx, []byte(fmt.Sprintf("k%d:%d", k, v)), channel.PutOptions{Key: []byte(fmt.Sprintf("k%d", k))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := q.Put(ctx, []byte("no key")); err != nil {
		t.Fatal(err)
	}
	if err := q.Disk().Sync(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := q.Compact(ctx)
	if err != nil {
		t.Fatalf("Compact: %v", err)
	}
	// Versions 0 and 1 of every key are superseded; those in sealed
	// segments go (the active segment's stay until it is sealed).
	if st.Removed == 0 || st.Removed > keys*(versions-1) || st.LogBytesAfter >= st.LogBytesBefore {
		t.Fatalf("Compact: %+v; want some of the %d superseded versions removed", st, keys*(versions-1))
	}
	if _, err := q.Disk().ReadAt(0); !errors.Is(err, diskqueue.ErrCompacted) {
		t.Errorf("ReadAt of a removed version: %v, want ErrCompacted", err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = open(t, dir, opts)
	defer q.Close()
	got := map[string]int{}
	plain := 0
	done, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for len(got) < keys || plain == 0 {
		m, err := q.Receive(done)
		if err != nil {
			t.Fatalf("Receive after %d keys: %v", len(got), err)
		}
		if m.Key == nil {
			plain++
		} else {
			k, v := parseKV(t, m)
			if _, dup := got[k]; dup || v != versions-1 {
				t.Fatalf("delivered %s:%d; want only the newest version, once", k, v)
			}
			got[k] = v
		}
		m.Finish()
	}
	nothing, cancel2 := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel2()
	if m, err := q.Receive(nothing); err == nil {
		t.Fatalf("unexpected %q after the newest of each key", m.Body)
	}
}
