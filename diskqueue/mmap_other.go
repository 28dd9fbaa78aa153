//go:build !linux

package diskqueue

func unmap([]byte) error { return nil }

func prefault([]byte) {}

func dropPages([]byte) {}

const pageSize = 4096

func notSupported(error) bool { return true }
