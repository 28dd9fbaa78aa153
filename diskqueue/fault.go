package diskqueue

import "runtime/debug"

// guarded runs f, which touches a mapping, and reports false if touching it
// faulted (the file was cut short underneath, or paging it in failed):
// debug.SetPanicOnFault turns the fault into a panic here rather than a
// crash of the process. Any other panic goes on.
func guarded(f func()) (ok bool) {
	defer endGuard(debug.SetPanicOnFault(true), &ok)
	f()
	return true
}

// endGuard ends a fault guard begun by debug.SetPanicOnFault(true), whose
// old setting it restores. It is deferred itself, as
// defer endGuard(debug.SetPanicOnFault(true), &ok), since recover stops a
// panic only in the deferred function's own call: one deferred call per
// guard, which matters where one runs per record. A fault leaves *ok
// false; any other panic goes on.
func endGuard(old bool, ok *bool) {
	debug.SetPanicOnFault(old)
	if v := recover(); v != nil {
		if !isFault(v) {
			panic(v)
		}
		*ok = false
	}
}

// isFault reports whether a recovered value is a memory fault the runtime
// turned into a panic (debug.SetPanicOnFault).
func isFault(v any) bool {
	_, ok := v.(interface{ Addr() uintptr })
	return ok
}

// copyMapped copies len(b) bytes of m at off into b under a fault guard.
// It reports false, with b in any state, when m does not hold them or
// touching them faulted.
func copyMapped(b, m []byte, off int64) (ok bool) {
	if m == nil || off < 0 || off+int64(len(b)) > int64(len(m)) {
		return false
	}
	defer endGuard(debug.SetPanicOnFault(true), &ok)
	copy(b, m[off:])
	return true
}
