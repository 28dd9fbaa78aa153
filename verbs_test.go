package spillq_test

import (
	"reflect"
	"slices"
	"testing"

	"github.com/spillq/spillq"
)

// TestFacadeMethods: the façade's types offer what a program using a queue
// or a topic calls, and nothing else. A Queue and a topic's Channel wrap a
// *channel.Channel whose exported methods include the wiring spillq pairs
// it with its log, compactor, key state and dead-letter store by
// (Compacted, KeyState, PutBack, TimerStats); embedding it, as Queue once
// did, promoted all of them, and a caller of Compacted could make the
// channel count a message superseded that was not. A method added to one
// of these types has to be added here, on purpose. A topic's Channel has
// no Put: its messages are put to the topic.
func TestFacadeMethods(t *testing.T) {
	shared := []string{
		"Close", "Depth", "Empty", "FinishAll", "LatencyBuckets", "LatencySumSeconds",
		"Messages", "MsgTimeout", "Pause", "Receive", "ReceiveBatch", "Stats", "TryReceive", "Unpause",
	}
	for _, tc := range []struct {
		typ   reflect.Type
		allow []string
	}{
		{reflect.TypeFor[*spillq.Queue](), append([]string{
			"Compact", "CompactStats", "DeadLetters", "Disk", "Enqueue", "Health",
			"Put", "PutWith", "Replay", "Timers",
		}, shared...)},
		{reflect.TypeFor[*spillq.Channel](), shared},
		{reflect.TypeFor[*spillq.Topic](), []string{
			"Channel", "Channels", "Close", "Compact", "CompactStats", "DeadLetters", "DeleteChannel",
			"Enqueue", "Health", "KeyState", "Log", "Lookup", "Put", "PutBatch", "PutWith", "Stats",
		}},
	} {
		var got []string
		for i := range tc.typ.NumMethod() {
			got = append(got, tc.typ.Method(i).Name)
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(tc.allow))
		if !slices.Equal(got, want) {
			t.Errorf("%v's methods are %v, want %v", tc.typ, got, want)
		}
		for i := range tc.typ.Elem().NumField() {
			if f := tc.typ.Elem().Field(i); f.IsExported() {
				t.Errorf("%v has an exported field %s, through which its parts are reachable", tc.typ, f.Name)
			}
		}
	}
}
