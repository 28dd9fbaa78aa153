//go:build !(386 || amd64)

package diskqueue

// storesInOrder is false where another core may see a core's stores out
// of order: there an index entry goes into a mapping with an atomic store.
const storesInOrder = false
