package diskqueue

import "sync/atomic"

// ownedInt64 and ownedUint64 are counters that only holders of one lock
// (a cursor's readMu) change and anyone may load without it (Stats,
// Depth, the writer goroutine). A change under the lock needs no locked
// read-modify-write: on amd64 the holder's store is a plain MOV
// (storeOwned), which x86's total store order makes visible in program
// order, as a release store; the unlock that follows, a locked
// instruction, orders it before the holder's later loads. An atomic add
// or store is a locked instruction there too, 8 to 12 ns on the project's
// machine, and Read and Ack paid for three of them a record. Load, Store
// and Add stay atomic, for the few who change them seldom.
// The empty array gives them atomic.Uint64's alignment, which 32-bit CPUs
// need for 64-bit atomics.
type ownedInt64 struct {
	_ [0]atomic.Uint64
	v uint64
}

func (o *ownedInt64) Load() int64       { return int64(atomic.LoadUint64(&o.v)) }
func (o *ownedInt64) Store(v int64)     { atomic.StoreUint64(&o.v, uint64(v)) }
func (o *ownedInt64) Add(n int64) int64 { return int64(atomic.AddUint64(&o.v, uint64(n))) }

// addOwned adds n; the caller holds the lock every change is made under.
func (o *ownedInt64) addOwned(n int64) { storeOwned(&o.v, atomic.LoadUint64(&o.v)+uint64(n)) }

type ownedUint64 struct {
	_ [0]atomic.Uint64
	v uint64
}

func (o *ownedUint64) Load() uint64   { return atomic.LoadUint64(&o.v) }
func (o *ownedUint64) Store(v uint64) { atomic.StoreUint64(&o.v, v) }

// storeOwned stores v; the caller holds the lock every change is made
// under.
func (o *ownedUint64) storeOwned(v uint64) { storeOwned(&o.v, v) }
