package spillq_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
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
			"Enqueue", "Health", "KeyState", "Log", "Put", "PutBatch", "PutWith", "Stats",
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

// TestFacadeReachesNoEngineHandle: nothing a program reaches from Open or
// OpenTopic, through the methods' results and the exported fields of what
// they return, is a handle that can write, consume or close the stores
// the queue owns: a Put to its log behind the channel's back would be
// delivered with no envelope, a Read or Ack on its cursor would take a
// record from the channel, a Close would pull the files from under it.
// Disk, Timers and Log hand out a diskqueue.View instead, which only
// looks.
func TestFacadeReachesNoEngineHandle(t *testing.T) {
	forbidden := map[reflect.Type]bool{
		reflect.TypeFor[*channel.Channel]():  true,
		reflect.TypeFor[*channel.Fanout]():   true,
		reflect.TypeFor[*diskqueue.Queue]():  true,
		reflect.TypeFor[*diskqueue.Log]():    true,
		reflect.TypeFor[*diskqueue.Cursor](): true,
	}
	seen := map[reflect.Type]bool{}
	var walk func(typ reflect.Type, path string)
	walk = func(typ reflect.Type, path string) {
		if seen[typ] {
			return
		}
		seen[typ] = true
		if forbidden[typ] || (typ.Kind() != reflect.Pointer && forbidden[reflect.PointerTo(typ)]) {
			t.Errorf("%s is a %v", path, typ)
			return
		}
		for i := range typ.NumMethod() {
			m := typ.Method(i)
			for j := range m.Type.NumOut() {
				walk(m.Type.Out(j), path+"."+m.Name+"()")
			}
		}
		switch typ.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Chan:
			walk(typ.Elem(), path+"[]")
		case reflect.Map:
			walk(typ.Key(), path+"[key]")
			walk(typ.Elem(), path+"[]")
		case reflect.Func:
			for j := range typ.NumOut() {
				walk(typ.Out(j), path+"()")
			}
		case reflect.Struct:
			for i := range typ.NumField() {
				if f := typ.Field(i); f.IsExported() {
					walk(f.Type, path+"."+f.Name)
				}
			}
		}
	}
	walk(reflect.TypeOf(spillq.Open), "Open")
	walk(reflect.TypeOf(spillq.OpenTopic), "OpenTopic")
	var reached []string
	for typ := range seen {
		if strings.HasPrefix(typ.String(), "*diskqueue.View") {
			reached = append(reached, typ.String())
		}
	}
	if len(reached) == 0 {
		t.Error("the walk never reached a diskqueue.View: it does not follow Disk, Timers or Log")
	}
}
