package spillq

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spillq/spillq/diskqueue"
)

// HealthStatus is a queue's health: ok, degraded (it works, and needs
// attention), or failed (it does not, and will not until it is reopened).
type HealthStatus int

const (
	HealthOK HealthStatus = iota
	HealthDegraded
	HealthFailed
)

func (s HealthStatus) String() string {
	switch s {
	case HealthOK:
		return "ok"
	case HealthDegraded:
		return "degraded"
	case HealthFailed:
		return "failed"
	}
	return fmt.Sprintf("HealthStatus(%d)", int(s))
}

// MarshalText writes the status as String does, for JSON probes.
func (s HealthStatus) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// HealthOptions are the thresholds of Health. Zero values turn the
// user's thresholds off and take the defaults for the rest.
type HealthOptions struct {
	// MaxLag makes a channel whose oldest unfinished message stored in
	// the log was put longer ago than this degraded (for a Queue: of the
	// messages it spilled to disk; those in its memory buffer are not
	// timed). Zero: no limit.
	MaxLag time.Duration
	// MaxDepth makes a channel with more messages than this waiting for
	// delivery (in memory, on disk, requeued) degraded. Zero: no limit.
	MaxDepth int64
	// DiskFullRatio is the share of Disk.MaxDiskBytes at which the disk
	// counts as near its budget (degraded). Zero means 0.9; it has no
	// effect without a budget.
	DiskFullRatio float64
}

// DefaultDiskFullRatio is HealthOptions.DiskFullRatio's default.
const DefaultDiskFullRatio = 0.9

// Health is the one answer a probe needs: a status, and the reasons for
// it (empty when ok), each naming what it is about.
type Health struct {
	Status  HealthStatus `json:"status"`
	Reasons []string     `json:"reasons"`
}

// String is "ok", or the status and its reasons.
func (h Health) String() string {
	if len(h.Reasons) == 0 {
		return h.Status.String()
	}
	return h.Status.String() + ": " + strings.Join(h.Reasons, "; ")
}

func (h *Health) add(s HealthStatus, format string, args ...any) {
	h.Status = max(h.Status, s)
	h.Reasons = append(h.Reasons, fmt.Sprintf(format, args...))
}

// CombineHealth is the health of several queues, by name: the worst
// status, and every reason prefixed with its queue's name.
func CombineHealth(named map[string]Health) Health {
	var out Health
	names := make([]string, 0, len(named))
	for name := range named {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		h := named[name]
		out.Status = max(out.Status, h.Status)
		for _, r := range h.Reasons {
			out.Reasons = append(out.Reasons, name+": "+r)
		}
	}
	return out
}

// Health says whether the queue works, from its Stats and its disk
// queues' (and one read of the log when MaxLag is set and messages wait on
// disk):
//
//   - failed: closed, or a write or fsync of its log or timer store failed
//     (sticky: the log takes no writes until reopened, see package
//     diskqueue);
//   - degraded: a disk at or near its budget (Disk.MaxDiskBytes; a Put at
//     the budget returns diskqueue.ErrDiskFull or waits), reads of the log
//     failing now (nothing on disk is delivered meanwhile), a lag or depth
//     beyond opts' thresholds.
//
// A disk the file system itself has filled shows in the errors Put
// returns, not here.
func (q *Queue) Health(opts HealthOptions) Health {
	var h Health
	disk, timers := q.disk.Stats(), q.timers.Stats()
	if disk.Closed {
		h.add(HealthFailed, "closed")
		return h
	}
	judgeDisk(&h, "log", disk, opts)
	judgeDisk(&h, "timer store", timers, opts)
	s := q.Stats()
	var lag time.Duration
	if opts.MaxLag > 0 && disk.Depth > 0 {
		if rec, err := q.disk.ReadAt(disk.ReadSeq); err == nil {
			lag = max(time.Since(rec.Time), 0)
		}
	}
	judgeChannel(&h, "", int64(s.MemoryDepth)+s.DiskDepth+int64(s.Ready), lag, s.ReadErr, opts)
	return h
}

// Health says whether the topic and its channels work, as Queue.Health
// does, judging each channel's lag (ChannelStats.Lag) and depth: for a
// channel open in this process, the messages waiting for delivery; for one
// not open, the records of the log it has not finished.
func (t *Topic) Health(opts HealthOptions) Health {
	var h Health
	s := t.stats(false)
	if s.Log.Closed {
		h.add(HealthFailed, "closed")
		return h
	}
	judgeDisk(&h, "log", s.Log, opts)
	for _, c := range s.Channels {
		depth, readErr := c.Cursor.Depth, error(nil)
		if c.Open {
			depth = int64(c.Channel.MemoryDepth) + c.Channel.DiskDepth + int64(c.Channel.Ready)
			readErr = c.Channel.ReadErr
		}
		judgeChannel(&h, "channel "+c.Name+": ", depth, c.Lag, readErr, opts)
	}
	return h
}

func judgeDisk(h *Health, what string, s diskqueue.Stats, opts HealthOptions) {
	if s.WriteErr != nil {
		h.add(HealthFailed, "%s takes no writes until reopened: %v", what, s.WriteErr)
	}
	if s.MaxDiskBytes <= 0 {
		return
	}
	ratio := opts.DiskFullRatio
	if ratio <= 0 {
		ratio = DefaultDiskFullRatio
	}
	switch {
	case s.DiskBytes >= s.MaxDiskBytes:
		h.add(HealthDegraded, "%s disk full: %d of %d bytes", what, s.DiskBytes, s.MaxDiskBytes)
	case float64(s.DiskBytes) >= ratio*float64(s.MaxDiskBytes):
		h.add(HealthDegraded, "%s disk near its budget: %d of %d bytes", what, s.DiskBytes, s.MaxDiskBytes)
	}
}

func judgeChannel(h *Health, prefix string, depth int64, lag time.Duration, readErr error, opts HealthOptions) {
	if readErr != nil {
		h.add(HealthDegraded, "%sreads of the log failing: %v", prefix, readErr)
	}
	if opts.MaxLag > 0 && lag > opts.MaxLag {
		h.add(HealthDegraded, "%slag %v beyond %v", prefix, lag.Round(time.Millisecond), opts.MaxLag)
	}
	if opts.MaxDepth > 0 && depth > opts.MaxDepth {
		h.add(HealthDegraded, "%sdepth %d beyond %d", prefix, depth, opts.MaxDepth)
	}
}
