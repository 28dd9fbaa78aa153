// Package godq is spillq's compatibility layer with
// github.com/nsqio/go-diskqueue, nsqd's disk queue: [NewCompat] runs
// spillq's disk queue behind go-diskqueue's Interface and picks up a
// backlog go-diskqueue left in the same place, and [ChannelBackend] lets a
// [channel.Channel] spill to a go-diskqueue queue. It is its own package so
// that only programs that want go-diskqueue import it.
package godq
