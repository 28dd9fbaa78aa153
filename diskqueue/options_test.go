package diskqueue

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestOptionsValidation(t *testing.T) {
	bad := []Options{
		{MaxSegmentBytes: 10},
		{MaxSegmentBytes: 1 << 33},
		{MaxRecordBytes: -1},
		{MinRecordBytes: 100, MaxRecordBytes: 10},
		{SyncEvery: -1},
		{SyncInterval: -time.Second},
		{MaxDiskBytes: -1},
		{MaxDiskBytes: 10},
		{MaxDiskBytes: minDiskBytes(0) - 1}, // no room for an empty record beside an empty log
		{MaxDiskBytes: minDiskBytes(64) - 1, MinRecordBytes: 64},
		{RetainBytes: -1},
		{RetainAge: -time.Hour},
	}
	for _, o := range bad {
		if _, err := Open(t.TempDir(), o); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("Open(%+v): got %v, want ErrInvalidOptions", o, err)
		}
	}
	// The smallest budget takes the smallest record.
	tight := mustOpen(t, t.TempDir(), Options{MaxDiskBytes: minDiskBytes(0)})
	if err := tight.Put(context.Background(), nil); err != nil {
		t.Errorf("Put of an empty record at MaxDiskBytes %d: %v", minDiskBytes(0), err)
	}
	tight.Close()
	o := Options{SyncEvery: 7}
	q := mustOpen(t, t.TempDir(), o)
	defer q.Close()
	if o.MaxSegmentBytes != 0 {
		t.Fatal("Open wrote into the caller's Options")
	}
}
