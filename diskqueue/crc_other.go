//go:build !amd64 || purego

package diskqueue

// recordCRC is the checksum of the frame encodeFrame just wrote.
func recordCRC(frame []byte, _ uint32, _ byte, _ uint64, _ int64, _ []byte, _ int, _ []byte) uint32 {
	return frameCRC(frame)
}

// shortFrameCRC leaves every frame to frameCRC's portable code.
func shortFrameCRC([]byte) (uint32, bool) { return 0, false }
