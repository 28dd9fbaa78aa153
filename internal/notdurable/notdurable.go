// Package notdurable holds the one error value that diskqueue and channel
// both export (as diskqueue.ErrNotDurable and channel.ErrNotDurable): a
// Put that stored its record but stopped waiting for its fsync. One
// value, so that errors.Is matches it by either name, and so that the
// channel recognises it from any backend without importing diskqueue.
package notdurable

import "errors"

// Err is the shared value.
var Err = errors.New("stored, but not yet durable")
