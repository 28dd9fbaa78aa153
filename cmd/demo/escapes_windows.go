//go:build windows

package main

import "golang.org/x/sys/windows"

// enableEscapes turns on the console's handling of the escape sequences
// the live view draws with, which consoles before Windows Terminal leave
// off. False means it could not, and the view prints plain lines instead.
func enableEscapes(fd int) bool {
	h := windows.Handle(fd)
	var mode uint32
	if err := windows.GetConsoleMode(h, &mode); err != nil {
		return false
	}
	if mode&windows.ENABLE_VIRTUAL_TERMINAL_PROCESSING != 0 {
		return true
	}
	return windows.SetConsoleMode(h, mode|windows.ENABLE_VIRTUAL_TERMINAL_PROCESSING) == nil
}
