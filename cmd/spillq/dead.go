package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spillq/spillq"
	"github.com/spillq/spillq/channel"
	"github.com/spillq/spillq/diskqueue"
)

// cmdDead lists, redrives or purges the dead letters of a queue, or of one
// channel of a topic (-channel). list only reads, beside a running service;
// redrive and purge take the queue's lock (a topic's, for one of its
// channels, open or not: OpenDeadLetters takes it too).
func cmdDead(e *env, args []string) error {
	fs := newFlags("dead")
	name := fs.String("channel", "", "on a topic: the channel whose dead letters to work on")
	ids := fs.String("id", "", "only the letters of these message IDs (16 hex digits, as list shows them; comma-separated)")
	since := fs.String("since", "", "only letters dead-lettered at or after this RFC 3339 time")
	until := fs.String("until", "", "only letters dead-lettered before this RFC 3339 time")
	asJSON := fs.Bool("json", false, "list: one JSON object per line (body as text if it is UTF-8, else body_base64)")
	limit := fs.Int("limit", 0, "list: at most this many letters (0: all)")
	all := fs.Bool("all", false, "redrive, purge: every letter (required when no -id, -since or -until narrows them)")
	maxBody := fs.Int("max-body", 0, "redrive: the largest body the queue takes (its Disk.MaxRecordBytes; 0: spillq's default, 1 MiB)")
	pos, err := parseArgs(e, fs, args, 2)
	if err != nil {
		return err
	}
	action, dir := pos[0], pos[1]
	if action != "list" && action != "redrive" && action != "purge" {
		return usageErr("dead: action %q: want list, redrive or purge", action)
	}
	filter, err := deadFilter(*ids, *since, *until)
	if err != nil {
		return err
	}
	if action != "list" && !*all && len(filter.IDs) == 0 && filter.Since.IsZero() && filter.Until.IsZero() {
		return usageErr("dead %s: pass -id, -since or -until to choose letters, or -all for every one", action)
	}
	if err := checkQueue(dir); err != nil {
		return err
	}
	store, err := deadStoreDir(dir, *name)
	if err != nil {
		return err
	}
	ctx := context.Background()
	switch action {
	case "list":
		return listDead(e, store, filter, *asJSON, *limit)
	case "purge":
		d, err := spillq.OpenDeadLetters(store)
		if err != nil {
			return explainLocked(dir, err)
		}
		n, err := d.Purge(ctx, filter)
		if cerr := d.Close(); err == nil {
			err = cerr
		}
		fmt.Fprintf(e.stdout, "purged %d dead letters\n", n)
		return err
	}
	return redriveDead(ctx, e, dir, *name, filter, *maxBody)
}

// deadFilter parses the selection flags.
func deadFilter(ids, since, until string) (spillq.DeadFilter, error) {
	var f spillq.DeadFilter
	for s := range strings.SplitSeq(ids, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		id, err := strconv.ParseUint(s, 16, 64)
		if err != nil {
			return f, usageErr("-id %q: want message IDs in hex, as list shows them", s)
		}
		f.IDs = append(f.IDs, channel.ID(id))
	}
	var err error
	if since != "" {
		if f.Since, err = parseSince(since); err != nil {
			return f, err
		}
	}
	if until != "" {
		if f.Until, err = time.Parse(time.RFC3339Nano, until); err != nil {
			return f, usageErr("-until %q: want an RFC 3339 time such as 2026-11-29T15:04:05Z", until)
		}
	}
	return f, nil
}

// deadStoreDir is the dead-letter store of the queue in dir, or of its
// channel name on a topic.
func deadStoreDir(dir, name string) (string, error) {
	switch topic := isTopic(dir); {
	case topic && name == "":
		return "", usageErr("%s is a topic's directory: pass -channel NAME (each channel has its dead letters)", dir)
	case !topic && name != "":
		return "", fmt.Errorf("%s is a queue's directory, not a topic's: it has no channels (leave out -channel)", dir)
	case topic:
		ch := filepath.Join(dir, spillq.ChannelsDir, name)
		if _, err := os.Stat(ch); err != nil {
			return "", fmt.Errorf("%s has no channel %q with a store (%v)", dir, name, err)
		}
		return filepath.Join(ch, spillq.DeadDir), nil
	}
	return filepath.Join(dir, spillq.DeadDir), nil
}

// deadJSON is a letter as list -json writes it.
type deadJSON struct {
	ID         string            `json:"id"`
	Seq        uint64            `json:"seq"`
	Key        string            `json:"key,omitempty"`
	PutAt      time.Time         `json:"put_at"`
	DeadAt     time.Time         `json:"dead_at"`
	Attempts   uint16            `json:"attempts"`
	Reason     spillq.DeadReason `json:"reason"`
	Error      string            `json:"error"`
	Body       *string           `json:"body,omitempty"`
	BodyBase64 []byte            `json:"body_base64,omitempty"`
}

// listDead prints the letters of the store in dir, through a read-only
// view: it runs beside the service.
func listDead(e *env, dir string, f spillq.DeadFilter, asJSON bool, limit int) error {
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		fmt.Fprintln(e.stderr, "no dead letters (no dead-letter store yet)")
		return nil
	}
	dmg := &damage{w: e.stderr, cmd: "dead list"}
	n := 0
	for dl, err := range spillq.ListDeadLetters(context.Background(), dir, f) {
		if errors.Is(err, diskqueue.ErrCorrupt) || errors.Is(err, spillq.ErrNotDeadLetter) {
			dmg.report(err)
			continue
		}
		if err != nil {
			return err
		}
		if err := printDead(e, &dl, asJSON); err != nil {
			return err
		}
		if n++; limit > 0 && n >= limit {
			break
		}
	}
	if n == 0 && !asJSON {
		fmt.Fprintln(e.stderr, "no dead letters")
	}
	return dmg.result()
}

func printDead(e *env, dl *spillq.DeadLetter, asJSON bool) error {
	if asJSON {
		out := deadJSON{ID: dl.ID.String(), Seq: dl.Seq, Key: string(dl.Key), PutAt: dl.PutAt, DeadAt: dl.DeadAt, Attempts: dl.Attempts, Reason: dl.Reason, Error: dl.Error}
		if utf8.Valid(dl.Body) {
			s := string(dl.Body)
			out.Body = &s
		} else {
			out.BodyBase64 = dl.Body
		}
		b, err := json.Marshal(out)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(e.stdout, "%s\n", b)
		return err
	}
	key := ""
	if dl.Key != nil {
		key = fmt.Sprintf(" key=%q", dl.Key)
	}
	body := dl.Body
	if len(body) > 200 {
		body = body[:200]
	}
	_, err := fmt.Fprintf(e.stdout, "%s seq=%d dead=%s reason=%s attempts=%d%s error=%q body=%q (%d bytes)\n",
		dl.ID, dl.Seq, dl.DeadAt.UTC().Format(time.RFC3339Nano), dl.Reason, dl.Attempts, key, dl.Error, body, len(dl.Body))
	return err
}

// redriveDead opens the queue (or the topic and its channel) as a service
// would, taking its lock, and redrives the letters f selects.
func redriveDead(ctx context.Context, e *env, dir, name string, f spillq.DeadFilter, maxBody int) error {
	logger := slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	disk := diskqueue.Options{MaxRecordBytes: maxBody}
	var d *spillq.DeadLetters
	var closeAll func() error
	if name == "" {
		q, err := spillq.Open(dir, spillq.Options{Disk: disk, Logger: logger})
		if err != nil {
			return explainLocked(dir, err)
		}
		d, closeAll = q.DeadLetters(), q.Close
	} else {
		t, err := spillq.OpenTopic(dir, spillq.TopicOptions{Disk: disk, Logger: logger})
		if err != nil {
			return explainLocked(dir, err)
		}
		if !slices.Contains(t.Channels(), name) {
			t.Close()
			return fmt.Errorf("%s has no channel %q (it has %s)", dir, name, listNames("channel", t.Channels()))
		}
		if _, err := t.Channel(name, spillq.ChannelOptions{}); err != nil {
			t.Close()
			return err
		}
		if d, err = t.DeadLetters(name); err != nil {
			t.Close()
			return err
		}
		closeAll = t.Close
	}
	n, err := d.Redrive(ctx, f)
	if cerr := closeAll(); err == nil {
		err = cerr
	}
	fmt.Fprintf(e.stdout, "redrove %d dead letters: each is back with its ID and key, on its first attempt\n", n)
	if errors.Is(err, channel.ErrTooLarge) {
		err = fmt.Errorf("%w (pass the queue's -max-body)", err)
	}
	return err
}
