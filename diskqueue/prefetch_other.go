//go:build !amd64 || purego

package diskqueue

func prefetchWrite(*byte) {}

func prefetchRead(*byte) {}
