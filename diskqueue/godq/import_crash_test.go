package godq

import (
	"os"
	"strconv"
	"testing"
	"time"

	godiskqueue "github.com/nsqio/go-diskqueue"

	"github.com/spillq/spillq/internal/crashtest"
)

// TestImportCrash kills a child process at each step of an import, then
// opens the queue again: the backlog must come out whole, in order, each
// record once, and the old files must be gone. The import syncs only at
// its end, so a kill during the puts also takes records the queue had
// accepted but not yet written.
func TestImportCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("runs child processes")
	}
	for _, tc := range []struct {
		point string
		after int // the child dies at the after'th time it reaches point
	}{
		{"marker-written", 1},
		{"put", 1},
		{"put", 20},
		{"put", 47},
		{"synced", 1},
		{"meta-removed", 1},
		{"data-removed", 1},
	} {
		t.Run(tc.point+"/"+strconv.Itoa(tc.after), func(t *testing.T) {
			dir := t.TempDir()
			writeBacklog(t, dir, 60, 13)
			res := crashtest.Start(t, crashtest.Run{
				Test: "TestImportCrashChild",
				Dir:  dir,
				Env:  []string{"SPILLQ_IMPORT_POINT=" + tc.point, "SPILLQ_IMPORT_AFTER=" + strconv.Itoa(tc.after)},
			})
			if !res.KilledSelf {
				t.Fatal("the child was not killed at its crash point")
			}
			var l logCollector
			dq := openCompat(dir, &l)
			defer dq.Close()
			checkRetired(t, dir)
			drain(t, dq, records(13, 60))
		})
	}
}

// TestImportCrashChild is the process TestImportCrash kills: it opens the
// queue over the backlog and dies at the crash point it is given.
func TestImportCrashChild(t *testing.T) {
	dir, ok := crashtest.Dir()
	if !ok {
		t.Skip("run by TestImportCrash")
	}
	point := os.Getenv("SPILLQ_IMPORT_POINT")
	after, _ := strconv.Atoi(os.Getenv("SPILLQ_IMPORT_AFTER"))
	seen := 0
	dq := newCompat("q", dir, 256, 0, 1<<10, 2500, time.Second, func(godiskqueue.LogLevel, string, ...interface{}) {}, func(p string) {
		if p != point {
			return
		}
		if seen++; seen == after {
			self, _ := os.FindProcess(os.Getpid())
			self.Kill()
			select {} // the kill is on its way
		}
	})
	dq.Close()
	crashtest.Report("survived-error", "the crash point", point, after, "was never reached")
}
