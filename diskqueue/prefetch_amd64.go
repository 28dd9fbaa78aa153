//go:build !purego

package diskqueue

//go:noescape
func prefetchWrite(p *byte)

//go:noescape
func prefetchRead(p *byte)
