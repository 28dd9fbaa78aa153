package spillq_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// TestOpenRefusesRawLogs: a directory the diskqueue package wrote
// directly holds records that are not channel messages. Open and OpenTopic
// refuse it, rather than counting each record bad and dropping it, and
// every record is still there for diskqueue.Open.
func TestOpenRefusesRawLogs(t *testing.T) {
	ctx := context.Background()
	qd := t.TempDir()
	dq, err := diskqueue.Open(qd, diskqueue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		if err := dq.Put(ctx, []byte("raw record")); err != nil {
			t.Fatal(err)
		}
	}
	dq.Close()
	if q, err := spillq.Open(qd, spillq.Options{}); !errors.Is(err, diskqueue.ErrInvalidOptions) {
		if q != nil {
			q.Close()
		}
		t.Fatalf("Open of a raw queue: %v, want ErrInvalidOptions", err)
	}
	if dq, err = diskqueue.Open(qd, diskqueue.Options{}); err != nil {
		t.Fatal(err)
	}
	if d := dq.Depth(); d != 10 {
		t.Errorf("after the refusal the raw queue holds %d records, want 10", d)
	}
	dq.Close()

	ld := t.TempDir()
	l, err := diskqueue.OpenLog(ld, diskqueue.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Cursor("a", diskqueue.FromOldest()); err != nil {
		t.Fatal(err)
	}
	if err := l.Put(ctx, []byte("raw record")); err != nil {
		t.Fatal(err)
	}
	l.Close()
	if tp, err := spillq.OpenTopic(ld, spillq.TopicOptions{}); !errors.Is(err, diskqueue.ErrInvalidOptions) {
		if tp != nil {
			tp.Close()
		}
		t.Fatalf("OpenTopic of a raw log: %v, want ErrInvalidOptions", err)
	}
}

// TestOpenRefusedMakesNoDirectory: Open with channel options it refuses
// made the queue's directory first.
func TestOpenRefusedMakesNoDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "q")
	if _, err := spillq.Open(dir, spillq.Options{MemQueueSize: -1}); !errors.Is(err, channel.ErrInvalidOptions) {
		t.Fatalf("Open with MemQueueSize -1: %v, want ErrInvalidOptions", err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open refused its options and left %s behind (stat: %v)", dir, err)
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
