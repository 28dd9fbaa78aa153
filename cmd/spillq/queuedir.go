package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// segmentLog matches the name of a segment's log (FORMAT.md, "Directory").
var segmentLog = regexp.MustCompile(`^[0-9]{20}\.log$`)

// errNotQueue says a directory holds no queue. diskqueue's own Open would
// make one there, and OpenReadOnly would show an empty one, so a mistyped
// path would look like an empty queue.
var errNotQueue = errors.New("is not a spillq queue (no cursor file and no segment logs such as 00000000000000000000.log): check the path")

// queueFiles reports whether dir holds a queue, and whether it is empty.
// The names are enough: a queue that was ever opened has a cursor file,
// and one whose cursor file was lost still has its segments; checking their
// contents would call a damaged queue "not a queue", which verify and
// repair must not.
func queueFiles(dir string) (isQueue, empty bool, err error) {
	info, err := os.Stat(dir)
	if err != nil {
		return false, false, err
	}
	if !info.IsDir() {
		return false, false, fmt.Errorf("%s is not a directory", dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false, false, err
	}
	for _, e := range entries {
		if e.Name() == "cursor" || segmentLog.MatchString(e.Name()) {
			return true, false, nil
		}
	}
	return false, len(entries) == 0, nil
}

// checkQueue returns nil if dir holds a queue, else an error that names
// dir and says what is wrong.
func checkQueue(dir string) error {
	isQueue, _, err := queueFiles(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s: no such directory", dir)
	case err != nil:
		return err
	case !isQueue:
		return fmt.Errorf("%s %w", dir, errNotQueue)
	}
	return nil
}

// openRead opens the queue in dir read-only, after checking it is one.
func openRead(dir string) (*diskqueue.Queue, error) {
	if err := checkQueue(dir); err != nil {
		return nil, err
	}
	return diskqueue.OpenReadOnly(dir, diskqueue.Options{})
}

// openWrite opens the queue in dir for writing, taking its lock. With
// create, a missing or empty directory becomes a new queue; a directory
// holding anything else is refused either way, so a typo never scatters a
// queue's files among someone else's. A topic's directory is refused too:
// opened as a queue, its log would get a cursor of its own, and
// spillq.OpenTopic refuses a directory that has one.
func openWrite(dir string, create bool, logger *slog.Logger) (*diskqueue.Queue, error) {
	isQueue, empty, err := queueFiles(dir)
	switch {
	case err == nil && isTopic(dir):
		return nil, fmt.Errorf("%s is a topic's directory: this command works on a queue, through a cursor of its own, which would make spillq.OpenTopic refuse the directory ('spillq channel' manages a topic's channels)", dir)
	case errors.Is(err, fs.ErrNotExist) && create:
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%s: no such directory (pass -create to make a new queue there)", dir)
	case err != nil:
		return nil, err
	case isQueue:
	case empty && create:
	case empty:
		return nil, fmt.Errorf("%s %w (pass -create to make a new queue in this empty directory)", dir, errNotQueue)
	default:
		return nil, fmt.Errorf("%s %w; it holds other files, so no queue is made there", dir, errNotQueue)
	}
	o := diskqueue.Options{Logger: logger, MaxRecordBytes: maxWriteRecord}
	if isQueue {
		o.FileMode = queueFileMode(dir)
	}
	q, err := diskqueue.Open(dir, o)
	return q, explainLocked(dir, err)
}

// queueFileMode is the FileMode the tool writes to the queue in dir with:
// the service's, which the tool cannot know, told by the directory's mode
// less search (0700 makes 0600, 0750 makes 0640), so that a file the tool
// makes there (a segment, a cursor, a rebuilt index) is readable by no one
// the service's are not, nor hidden from one they are. Zero (diskqueue's
// default, 0600) if dir cannot be read.
func queueFileMode(dir string) fs.FileMode {
	info, err := os.Stat(dir)
	if err != nil {
		return 0
	}
	return info.Mode().Perm()&0o666 | 0o600
}

// maxWriteBody is the largest body put and import-nsqd write: the default
// limit of spillq.Open and of diskqueue (and nsqd's --max-msg-size), and
// maxWriteRecord the record that takes, the body in a channel message
// envelope when the queue holds those (spillq.Open's log takes the same).
const (
	maxWriteBody   = diskqueue.DefaultMaxRecordBytes
	maxWriteRecord = maxWriteBody + channel.MaxEnvelopeOverhead
)

// repairable is what repair needs of an open queue or topic log.
type repairable interface {
	io.Closer
	RebuildIndexes(ctx context.Context) (int, error)
}

// openRepair opens dir for repair, taking its lock: a queue as openWrite
// does, a topic's log as itself, with no cursor of its own. Open repairs
// what it finds and logs each action to logger.
func openRepair(dir string, logger *slog.Logger) (repairable, error) {
	if !isTopic(dir) {
		q, err := openWrite(dir, false, logger)
		if err != nil {
			return nil, err
		}
		return q, nil
	}
	if err := checkQueue(dir); err != nil {
		return nil, err
	}
	l, err := diskqueue.OpenLog(dir, diskqueue.Options{Logger: logger, FileMode: queueFileMode(dir)})
	if err != nil {
		return nil, explainLocked(dir, err)
	}
	return l, nil
}

// explainLocked tells the operator what to do about diskqueue.ErrLocked
// from opening dir for writing; other errors come back as they are.
func explainLocked(dir string, err error) error {
	if errors.Is(err, diskqueue.ErrLocked) {
		return fmt.Errorf("%s is locked (%w): a service or another spillq command has the queue open; stop it first", dir, diskqueue.ErrLocked)
	}
	return err
}

// isTopic reports whether dir is a topic's (spillq.OpenTopic): it has a
// channels/ subdirectory, as spillq.Open checks to refuse one. A topic's
// named cursors are its channels, each with a timer store in
// channels/NAME.
func isTopic(dir string) bool {
	info, err := os.Stat(filepath.Join(dir, spillq.ChannelsDir))
	return err == nil && info.IsDir()
}

// willCreate reports whether openWrite(dir, true, …) would make a new
// queue, so a command can ask for what it needs to know first.
func willCreate(dir string) bool {
	isQueue, _, err := queueFiles(dir)
	return err == nil && !isQueue || errors.Is(err, fs.ErrNotExist)
}

// segmentLogs lists the segment logs in dir, oldest first (the names sort
// in log order), with their sizes.
func segmentLogs(dir string) ([]fileInfo, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var logs []fileInfo
	for _, e := range entries {
		if !segmentLog.MatchString(e.Name()) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // deleted since the listing: consumed
		}
		logs = append(logs, fileInfo{Name: e.Name(), Bytes: info.Size()})
	}
	return logs, nil
}

type fileInfo struct {
	Name  string `json:"name"`
	Bytes int64  `json:"bytes"`
}
