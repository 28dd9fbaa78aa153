package diskqueue

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: every Queue's
// writer must be gone after Close.
func TestMain(m *testing.M) {
	// The crash test's child is killed mid-run, not left to exit.
	if os.Getenv("SPILLQ_CRASHTEST_DIR") != "" {
		os.Exit(m.Run())
	}
	goleak.VerifyTestMain(m)
}
