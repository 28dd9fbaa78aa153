package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/spillq/spillq/diskqueue"
	"github.com/spillq/spillq/internal/vfs"
)

// Damage in the middle of a log stays there until its segment is deleted:
// readers skip it (copying it to a .bad file), but Verify finds it again on
// every run. An operator who has looked at it acknowledges it with
// 'spillq repair -ack-bad', which renames each .bad file present when the
// run starts from NAME.bad to NAME.acked.bad. Verify then reports damage
// inside an acknowledged file's byte range as acknowledged, not as a
// problem. The acknowledgement lives in the file name, beside the bytes it
// is about, because diskqueue leaves every *.bad file alone (and logs any
// file it does not know, so a ledger or subdirectory would be reported at
// every Open); new damage, in bytes no acknowledged file covers, turns
// verify red again.
const ackedSuffix = ".acked.bad"

// badName parses the .bad names diskqueue writes (FORMAT.md, "Directory")
// and their acknowledged forms: SEGMENT.log.OFFSET.bad for damaged records
// or a torn tail, SEGMENT.log.bad for a whole segment set aside.
var badName = regexp.MustCompile(`^([0-9]{20}\.log)(?:\.([0-9]+))?(\.acked)?\.bad$`)

// badFile is a .bad file in a queue directory.
type badFile struct {
	Name         string `json:"name"`
	Bytes        int64  `json:"bytes"`
	Acknowledged bool   `json:"acknowledged"`
	Log          string `json:"log,omitempty"` // the segment log the bytes came from, if the name says
	Offset       int64  `json:"offset"`        // where in Log they started; -1 for a whole segment or an unknown name
	// SegmentGone: Log no longer exists, so the file is all that is left of
	// its bytes and no reader will meet them again; safe to delete once
	// inspected.
	SegmentGone bool `json:"segment_gone"`
	// SameAs names the acknowledged file for the same damage, when a reader
	// met it again after the acknowledgement and copied it once more: the
	// damage is acknowledged, and 'repair -ack-bad' removes an identical
	// copy.
	SameAs string `json:"same_as,omitempty"`
}

// listBad lists the .bad files in dir, in name order.
func listBad(dir string) ([]badFile, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	logs := map[string]bool{}
	for _, e := range entries {
		logs[e.Name()] = true
	}
	var bad []badFile
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".bad") {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue // removed since the listing
		}
		b := badFile{Name: e.Name(), Bytes: info.Size(), Offset: -1, Acknowledged: strings.HasSuffix(e.Name(), ackedSuffix)}
		if m := badName.FindStringSubmatch(e.Name()); m != nil {
			b.Log = m[1]
			b.SegmentGone = !logs[m[1]]
			if m[2] != "" {
				b.Offset, _ = strconv.ParseInt(m[2], 10, 64)
			}
		}
		bad = append(bad, b)
	}
	for i := range bad {
		twin := strings.TrimSuffix(bad[i].Name, ".bad") + ackedSuffix
		if !bad[i].Acknowledged && logs[twin] {
			bad[i].Acknowledged, bad[i].SameAs = true, twin
		}
	}
	sort.Slice(bad, func(i, j int) bool { return bad[i].Name < bad[j].Name })
	return bad, nil
}

// isDamage reports whether p is damaged bytes in a log that readers skip
// and that can be set aside: not a torn tail (repair cuts those), an index
// (rebuilt) or an I/O error.
func isDamage(p diskqueue.Problem) bool {
	return p.End > p.Offset && p.Offset >= 0 && segmentLog.MatchString(p.File)
}

// covering returns the .bad file, acknowledged or (if none is) not, whose
// bytes include the start of damage p, or nil.
func covering(p diskqueue.Problem, bad []badFile) *badFile {
	var found *badFile
	for i := range bad {
		b := &bad[i]
		if b.Log != p.File || b.Offset < 0 || p.Offset < b.Offset || p.Offset >= b.Offset+max(b.Bytes, 1) {
			continue
		}
		if b.Acknowledged {
			return b
		}
		found = b
	}
	return found
}

// problemState classifies what Verify found against the .bad files.
type problemState struct {
	diskqueue.Problem
	BadFile      string // the .bad file holding the damaged bytes, if any
	Acknowledged bool
}

func classify(problems []diskqueue.Problem, bad []badFile) (out []problemState, open int) {
	for _, p := range problems {
		s := problemState{Problem: p}
		if isDamage(p) {
			if b := covering(p, bad); b != nil {
				s.BadFile, s.Acknowledged = b.Name, b.Acknowledged
			}
		}
		if !s.Acknowledged {
			open++
		}
		out = append(out, s)
	}
	return out, open
}

// setAside copies the bytes of damage p to SEGMENT.log.OFFSET.bad, the
// name a reader skipping it would give them, so they can be inspected and
// acknowledged without waiting for a reader to reach them (damage behind
// the read cursor never is).
func setAside(dir string, p diskqueue.Problem) (string, error) {
	name := fmt.Sprintf("%s.%d.bad", p.File, p.Offset)
	src, err := os.Open(filepath.Join(dir, p.File))
	if err != nil {
		return "", err
	}
	defer src.Close()
	info, err := src.Stat()
	if err != nil {
		return "", err
	}
	buf := make([]byte, p.End-p.Offset)
	if _, err := src.ReadAt(buf, p.Offset); err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	if err := writeNew(filepath.Join(dir, name), buf, info.Mode().Perm()); err != nil {
		return "", err
	}
	return name, nil
}

// writeNew writes b to a file that must not exist yet, with mode perm (the
// segment's the bytes come from: readable by those who could read them
// there), and syncs it and its directory: the copy is all that will be
// left of the bytes once the segment goes.
func writeNew(path string, b []byte, perm fs.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return err
	}
	return vfs.OS.SyncDir(filepath.Dir(path))
}

// acknowledge renames b to its acknowledged name. If that name is taken (a
// reader met the same damage again after an earlier acknowledgement), an
// identical copy is removed and a different one left alone.
func acknowledge(dir string, b badFile) (to string, removed bool, err error) {
	to = strings.TrimSuffix(b.Name, ".bad") + ackedSuffix
	from, target := filepath.Join(dir, b.Name), filepath.Join(dir, to)
	if _, err := os.Lstat(target); err == nil {
		same, err := sameContents(from, target)
		if err != nil {
			return "", false, err
		}
		if !same {
			return "", false, fmt.Errorf("%s: %s exists with other bytes; inspect both and delete one by hand", b.Name, to)
		}
		if err := os.Remove(from); err != nil {
			return "", false, err
		}
		return to, true, vfs.OS.SyncDir(dir)
	}
	if err := os.Rename(from, target); err != nil {
		return "", false, err
	}
	return to, false, vfs.OS.SyncDir(dir)
}

func sameContents(a, b string) (bool, error) {
	x, err := os.ReadFile(a)
	if err != nil {
		return false, err
	}
	y, err := os.ReadFile(b)
	if err != nil {
		return false, err
	}
	return bytes.Equal(x, y), nil
}

// badSummary is stat's and verify's one line about .bad files.
func badSummary(bad []badFile) string {
	acked, gone := 0, 0
	for _, b := range bad {
		if b.Acknowledged {
			acked++
		}
		if b.SegmentGone {
			gone++
		}
	}
	if len(bad) == 0 {
		return "0"
	}
	s := fmt.Sprintf("%d (%d acknowledged, %d not", len(bad), acked, len(bad)-acked)
	if gone > 0 {
		s += fmt.Sprintf("; %d from segments already deleted", gone)
	}
	return s + ")"
}

func badLine(b badFile) string {
	s := fmt.Sprintf("%s  %d bytes", b.Name, b.Bytes)
	switch {
	case b.SameAs != "":
		s += "  acknowledged (a second copy of " + b.SameAs + ")"
	case b.Acknowledged:
		s += "  acknowledged"
	default:
		s += "  not acknowledged"
	}
	if b.SegmentGone {
		s += "  (its segment is gone: delete it once inspected)"
	}
	return s
}
