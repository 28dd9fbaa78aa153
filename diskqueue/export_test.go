package diskqueue

// Hooks for the external tests (package diskqueue_test), compiled only
// into test binaries.

// CrashPoints lists the moments log.go and writer.go name with crashPoint, where
// SetCrashPoint can stop a test's child. Those of compaction (compact.go,
// compactswap.go) are also in CompactCrashPoints, in the order a compaction
// passes them.
var CrashPoints = append([]string{"index-flush", "rotate-sealed", "rotate-created", "cursor-persist", "retention-delete", "spare-rename"}, CompactCrashPoints...)

// CompactCrashPoints are the steps of Log.Compact, in order: new files
// written (not fsynced), new files durable, marker durable, new log
// renamed into place, every new file renamed and the directory fsynced,
// the new read handles swapped in (the marker not yet removed).
var CompactCrashPoints = []string{"compact-writing", "compact-written", "compact-marked", "compact-renamed-log", "compact-renamed", "compact-swapped"}

// SetCrashPoint makes opts call f at every named crash point.
func SetCrashPoint(opts *Options, f func(point string)) { opts.crashPointForTesting = f }

// SparesUsed reports how many rotations renamed a spare segment into place.
func SparesUsed(l *Log) int64 { return l.sparesUsed.Load() }

// SetOpenSealed makes opts keep the read handles of at most n sealed
// segments nobody holds (maxOpenSealed).
func SetOpenSealed(opts *Options, n int) { opts.openSealedForTesting = n }

// SetOpenBitmaps makes opts have each cursor look for acknowledgement
// files to close once more than n are open (maxOpenBitmaps).
func SetOpenBitmaps(opts *Options, n int) { opts.openBitmapsForTesting = n }

// SetFullHook makes opts call f each time a Put with BlockWhenFull is about
// to wait for space.
func SetFullHook(opts *Options, f func()) { opts.fullHookForTesting = f }
