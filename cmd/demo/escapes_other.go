//go:build !windows

package main

// enableEscapes reports whether the terminal on fd takes the escape
// sequences the live view draws with: Unix terminals do.
func enableEscapes(fd int) bool { return true }
