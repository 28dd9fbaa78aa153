// Package closed holds the one error value that channel, diskqueue and
// nsqbridge all export as ErrClosed (and spillq as spillq.ErrClosed): a
// call on something closed, or cut short by its Close. One value, so that
// errors.Is matches it by any of those names whichever layer returned it:
// a caller of spillq testing channel.ErrClosed also recognises the disk
// log's, and a layer passes on the one below's without translating it.
package closed

import "errors"

// Err is the shared value.
var Err = errors.New("spillq: closed")
