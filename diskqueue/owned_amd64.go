//go:build !purego && !race

package diskqueue

// storeOwned is a plain 8-byte store of v to *p (owned.go). In assembly,
// so that the compiler neither drops nor moves it and the store is one
// instruction, as the atomic loads of *p need; the race detector, which
// would see a plain store racing with those loads, gets the atomic
// store instead (owned_other.go).
//
//go:noescape
func storeOwned(p *uint64, v uint64)
