package spillq

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Permanent marks a handler's error as one no retry can mend (a body that
// does not parse, a record that no longer exists): the worker dead-letters
// the message at once, with err, instead of spending its attempts on it.
// errors.Is and errors.As see err through it.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Snooze is a handler's result that gives the message back, to be
// delivered again after d, without spending an attempt: for work that
// cannot be done yet (a rate limit, a resource not ready). A message
// snoozed for ever is never dead-lettered.
func Snooze(d time.Duration) error { return &snoozeError{d} }

type snoozeError struct{ d time.Duration }

func (e *snoozeError) Error() string { return fmt.Sprintf("snoozed for %v", e.d) }

// PanicError is the error a handler's panic becomes: its value and the
// goroutine's stack where it panicked. The message is retried as for any
// error, and the dead-letter reason of its last attempt carries the text.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("handler panicked: %v\n%s", e.Value, e.Stack)
}

// ExponentialBackoff returns a retry delay policy for
// WorkerOptions.Backoff: exponential with full jitter, a delay drawn
// evenly from [0, min(limit, base·2^(attempts-1))), so retries of many
// failed messages spread out instead of coming back together.
func ExponentialBackoff(base, limit time.Duration) func(attempts uint16, err error) time.Duration {
	return func(attempts uint16, _ error) time.Duration {
		ceiling := limit
		if n := max(int(attempts)-1, 0); n < 62 && base <= limit>>n {
			ceiling = base << n
		}
		if ceiling <= 0 {
			return 0
		}
		return rand.N(ceiling)
	}
}
