package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/diskqueue"
)

// cursorKind is what the cursor and channel commands manage. Both are a
// named cursor of a log (cursors/NAME); a topic's channel also has a timer
// store, channels/NAME, which holds its deferred messages.
type cursorKind struct {
	noun  string // the command, and what it calls the thing it manages
	topic bool   // DIR must be a topic's (channel), or must not be (cursor)
}

var (
	namedCursor  = cursorKind{noun: "cursor"}
	topicChannel = cursorKind{noun: "channel", topic: true}
)

// cmdCursor manages a log's named cursors: create one at a position,
// delete one, or reset one (move it to the position given, in place).
// It takes the queue's lock: stop the service first.
func cmdCursor(e *env, args []string) error { return manageCursor(e, args, namedCursor) }

// cmdChannel manages a topic's channels as cmdCursor does a log's cursors.
// Delete also removes the channel's timer store, after its cursor, as
// spillq.Topic.DeleteChannel does. Reset moves only where the channel reads
// the log: its timer store stays, so the messages deferred in it are still
// delivered when due.
func cmdChannel(e *env, args []string) error { return manageCursor(e, args, topicChannel) }

func manageCursor(e *env, args []string, k cursorKind) error {
	flags := newFlags(k.noun)
	from := flags.String("from", "next", "where a created or reset "+k.noun+" starts: next, oldest or a seq")
	since := flags.String("since", "", "start at the first record at or after this RFC 3339 time (instead of -from)")
	pos, err := parseArgs(e, flags, args, 3)
	if err != nil {
		return err
	}
	action, name, dir := pos[0], pos[1], pos[2]
	if action != "create" && action != "delete" && action != "reset" {
		return usageErr("%s: action %q: want create, delete or reset", k.noun, action)
	}
	start, err := parseStart(*from, *since)
	if err != nil {
		return err
	}
	if err := checkQueue(dir); err != nil {
		return err
	}
	switch topic := isTopic(dir); {
	case k.topic && !topic:
		return fmt.Errorf("%s is not a topic's directory (it has no %s/): 'spillq cursor' manages its named cursors", dir, spillq.ChannelsDir)
	case !k.topic && topic:
		return fmt.Errorf("%s is a topic's directory: its cursors are its channels, which 'spillq channel' manages with their timer stores", dir)
	}
	// The log alone: opening it as a Queue would give it a cursor of its
	// own, which retention would then wait for too (and which makes a
	// topic's directory one spillq.OpenTopic refuses).
	l, err := diskqueue.OpenLog(dir, diskqueue.Options{FileMode: queueFileMode(dir)})
	if err != nil {
		return explainLocked(dir, err)
	}
	defer l.Close()
	exists := slices.Contains(l.Cursors(), name)
	switch {
	case action == "create" && exists:
		return fmt.Errorf("%s %q exists (reset moves it)", k.noun, name)
	case action != "create" && !exists:
		return fmt.Errorf("%s %q does not exist (%s has %s)", k.noun, name, dir, listNames(k.noun, l.Cursors()))
	}
	switch action {
	case "reset":
		// In place, in steps a crash cannot split into a lost cursor.
		if err := l.ResetCursor(name, start); err != nil {
			return err
		}
	case "delete":
		if err := l.DeleteCursor(name); err != nil {
			return err
		}
		if k.topic {
			// After the cursor, as Topic.DeleteChannel does: a timer
			// store left without one is a deletion cut short, which the
			// next OpenTopic finishes.
			timers := filepath.Join(dir, spillq.ChannelsDir, name)
			if err := os.RemoveAll(timers); err != nil {
				return fmt.Errorf("deleted the cursor of channel %s; remove its timer store: %w (the next OpenTopic removes it)", name, err)
			}
		}
		fmt.Fprintf(e.stdout, "deleted %s %s\n", k.noun, name)
		return l.Close()
	}
	c, err := l.Cursor(name, start)
	if err != nil {
		return err
	}
	cs := c.Stats()
	fmt.Fprintf(e.stdout, "%s %s at seq %d, %d records to read\n", k.noun, name, cs.ReadSeq, cs.Depth)
	if !k.topic && action == "create" {
		fmt.Fprintf(e.stdout, "until a program reads and acknowledges through it, it keeps every segment from seq %d on ('spillq cursor delete %s %s' gives them back)\n", cs.ReadSeq, name, dir)
	}
	if k.topic && action == "reset" {
		fmt.Fprintf(e.stdout, "its timer store (%s/%s) is kept: messages deferred there are still delivered when due\n", spillq.ChannelsDir, name)
	}
	return l.Close()
}

// listNames lists a log's cursors for an error message: "" is a queue's
// own cursor, not a named one.
func listNames(noun string, names []string) string {
	names = slices.DeleteFunc(names, func(n string) bool { return n == "" })
	if len(names) == 0 {
		return "no " + noun + "s"
	}
	return fmt.Sprintf("%ss %s", noun, strings.Join(names, ", "))
}

// parseStart resolves -from and -since into where a cursor starts.
func parseStart(from, since string) (diskqueue.Start, error) {
	switch {
	case since != "":
		t, err := parseSince(since)
		return diskqueue.FromTime(t), err
	case from == "next":
		return diskqueue.FromNext(), nil
	case from == "oldest":
		return diskqueue.FromOldest(), nil
	}
	seq, err := strconv.ParseUint(from, 10, 64)
	if err != nil {
		return diskqueue.Start{}, usageErr("-from %q: want next, oldest or a seq", from)
	}
	return diskqueue.FromSeq(seq), nil
}

// parseSince parses the -since flag of dump, cursor and channel.
func parseSince(since string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, since)
	if err != nil {
		return time.Time{}, usageErr("-since %q: want an RFC 3339 time such as 2026-11-29T15:04:05Z", since)
	}
	return t, nil
}
