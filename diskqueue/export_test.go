package diskqueue

// Hooks for the external tests (package diskqueue_test), compiled only
// into test binaries.

// CrashPoints lists the moments log.go and writer.go name with crashPoint, where
// SetCrashPoint can stop a test's child.
var CrashPoints = []string{"index-flush", "rotate-sealed", "rotate-created", "cursor-persist", "retention-delete", "spare-rename"}

// SetCrashPoint makes opts call f at every named crash point.
func SetCrashPoint(opts *Options, f func(point string)) { opts.crashPointForTesting = f }

// SparesUsed reports how many rotations renamed a spare segment into place.
func SparesUsed(l *Log) int64 { return l.sparesUsed.Load() }
