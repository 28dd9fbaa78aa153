//go:build 386 || amd64

package diskqueue

// storesInOrder says the CPU makes a core's stores visible to the others
// in the order it made them (x86's total store order), so a plain store
// into a mapping publishes what was copied before it, as a release store
// would, without the locked instruction (about 10 ns on the project's
// machine) an atomic store costs there. The compiler keeps stores in
// program order and does not move them across the copy's call.
const storesInOrder = true
