//go:build !amd64 || purego || race

package diskqueue

import "sync/atomic"

// storeOwned stores v to *p (owned.go): an atomic store, which is no
// locked instruction on the other 64-bit CPUs Go supports, and which the
// race detector understands.
func storeOwned(p *uint64, v uint64) { atomic.StoreUint64(p, v) }
