package godq

import (
	"strconv"
	"testing"
	"time"

	godiskqueue "github.com/nsqio/go-diskqueue"

	"github.com/spillq/spillq/internal/crashtest"
)

// TestCompatConsumedSurvivesCrash: a record handed out by ReadChan counts
// as consumed, as in go-diskqueue, and that is recorded in the kernel at
// once. After a SIGKILL the reopened queue holds exactly what was put and
// not taken, but for the record in the hand-off at the kill (handed out
// again if the acknowledgement had not landed, gone if the consumer had it
// but had not reported it yet); go-diskqueue itself hands out again
// everything read since its last metadata sync.
func TestCompatConsumedSurvivesCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a child process")
	}
	dir := t.TempDir()
	res := crashtest.Start(t, crashtest.Run{Test: "TestCompatConsumedChild", Dir: dir, KillAfter: 300, KillKind: "took"})
	put, took := res.Set("put"), res.Set("took")
	if len(put) != 1000 || len(took) < 300 {
		t.Fatalf("the child put %d and took %d", len(put), len(took))
	}
	dq := newCompat("q", dir, 1<<20, 0, 1<<10, 2500, time.Second, func(godiskqueue.LogLevel, string, ...interface{}) {}, nil)
	defer dq.Close()
	back := 0
	left := map[string]bool{}
	for dq.Depth() > 0 {
		select {
		case b := <-dq.ReadChan():
			if took[string(b)] {
				back++
			}
			left[string(b)] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("Depth %d but nothing to read", dq.Depth())
		}
	}
	if back > 1 {
		t.Fatalf("%d records taken before the kill were handed out again, at most the one in hand-off may be", back)
	}
	// The child reports a record after ReadChan gave it; one received and
	// not yet reported at the kill was consumed (go-diskqueue's meaning)
	// and is neither reported nor left.
	var gone []string
	for id := range put {
		if !took[id] && !left[id] {
			gone = append(gone, id)
		}
	}
	if len(gone) > 1 {
		t.Fatalf("records put and never reported taken are gone: %v; at most the one in the consumer's hands at the kill may be", gone)
	}
}

// TestCompatConsumedChild puts 1000 records, then takes them from ReadChan
// until TestCompatConsumedSurvivesCrash kills it.
func TestCompatConsumedChild(t *testing.T) {
	dir, ok := crashtest.Dir()
	if !ok {
		t.Skip("run by TestCompatConsumedSurvivesCrash")
	}
	dq := newCompat("q", dir, 1<<20, 0, 1<<10, 2500, time.Second, func(godiskqueue.LogLevel, string, ...interface{}) {}, nil)
	for i := 0; i < 1000; i++ {
		if err := dq.Put([]byte(strconv.Itoa(i))); err != nil {
			crashtest.Report("put-error", err)
			select {}
		}
		crashtest.Report("put", i)
	}
	for b := range dq.ReadChan() {
		crashtest.Report("took", string(b))
	}
	select {}
}
