package main

import (
	"fmt"
	"strconv"
	"time"

	"github.com/spillq/spillq/diskqueue"
)

// cmdCursor manages a log's named cursors: create one at a position,
// delete one, or reset one (delete, then create at the position given).
// It takes the queue's lock: stop the service first.
func cmdCursor(e *env, args []string) error {
	fs := newFlags("cursor")
	from := fs.String("from", "next", "where a created or reset cursor starts: next, oldest or a seq")
	since := fs.String("since", "", "start at the first record at or after this RFC 3339 time (instead of -from)")
	pos, err := parseArgs(e, fs, args, 3)
	if err != nil {
		return err
	}
	action, name, dir := pos[0], pos[1], pos[2]
	if action != "create" && action != "delete" && action != "reset" {
		return usageErr("cursor: action %q: want create, delete or reset", action)
	}
	start := diskqueue.FromNext()
	switch {
	case *since != "":
		t, err := time.Parse(time.RFC3339Nano, *since)
		if err != nil {
			return usageErr("-since %q: want an RFC 3339 time such as 2026-11-29T15:04:05Z", *since)
		}
		start = diskqueue.FromTime(t)
	case *from == "next":
	case *from == "oldest":
		start = diskqueue.FromOldest()
	default:
		seq, err := strconv.ParseUint(*from, 10, 64)
		if err != nil {
			return usageErr("-from %q: want next, oldest or a seq", *from)
		}
		start = diskqueue.FromSeq(seq)
	}
	// The log alone: opening it as a Queue would give it a cursor of its
	// own, which retention would then wait for too.
	if err := checkQueue(dir); err != nil {
		return err
	}
	q, err := diskqueue.OpenLog(dir, diskqueue.Options{})
	if err != nil {
		return err
	}
	defer q.Close()
	exists := false
	for _, n := range q.Cursors() {
		exists = exists || n == name
	}
	switch {
	case action == "create" && exists:
		return fmt.Errorf("cursor %q exists (reset moves it)", name)
	case action != "create" && !exists:
		return fmt.Errorf("cursor %q: %w", name, diskqueue.ErrNotFound)
	}
	if action != "create" {
		if err := q.DeleteCursor(name); err != nil {
			return err
		}
		if action == "delete" {
			fmt.Fprintf(e.stdout, "deleted cursor %s\n", name)
			return q.Close()
		}
	}
	c, err := q.Cursor(name, start)
	if err != nil {
		return err
	}
	cs := c.Stats()
	fmt.Fprintf(e.stdout, "cursor %s at seq %d, %d records to read\n", name, cs.ReadSeq, cs.Depth)
	return q.Close()
}
