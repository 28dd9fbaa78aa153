package diskqueue

// Hooks for the external tests (package diskqueue_test), compiled only
// into test binaries.

// CrashPoints lists the named moments SetCrashPoint can stop at.
var CrashPoints = crashPoints

// SetCrashPoint makes opts call f at every named crash point.
func SetCrashPoint(opts *Options, f func(point string)) { opts.crashPointForTesting = f }
