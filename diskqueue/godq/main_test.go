package godq_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves a goroutine behind: every queue's
// reader and pump must be gone after Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
