package diskqueue

import (
	"bytes"
	"fmt"
	"io"
	"os"

	"github.com/spillq/spillq/internal/vfs"
)

// The file-system seam is internal/vfs's: the queue touches the disk
// through Options.FS, the OS's unless a test gives the crash-simulating or
// the fault-injecting one. The names here are the queue's for its types.
type (
	fileSystem = vfs.FS
	file       = vfs.File
	mapper     = vfs.Mapper
	puncher    = vfs.Puncher
)

// readHead returns the first n bytes of the file name, or as many as it
// has: what Open and Verify look at of a file's header alone.
func readHead(fsys fileSystem, name string, n int) ([]byte, error) {
	f, err := fsys.OpenFile(name, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, n)
	k, err := f.ReadAt(b, 0)
	if err != nil && k < n && err != io.EOF {
		return nil, err
	}
	return b[:k], nil
}

// readFile reads a whole file through the file-system seam.
func readFile(fsys fileSystem, name string) ([]byte, error) { return vfs.ReadFile(fsys, name) }

// writeAtomically replaces path with header+body: temporary file, fsync,
// rename, directory fsync.
func (l *Log) writeAtomically(path string, header, body []byte) error {
	tmp := path + tmpSuffix
	f, err := l.fs.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC, l.opts.FileMode)
	if err != nil {
		return fmt.Errorf("diskqueue: open: %w", err)
	}
	_, err = f.WriteAt(append(header, body...), 0)
	if err == nil && !l.opts.NoSync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = l.fs.Rename(tmp, path)
	}
	if err == nil && !l.opts.NoSync {
		err = l.fs.SyncDir(l.dir)
	}
	if err != nil {
		l.fs.Remove(tmp)
		return fmt.Errorf("diskqueue: open: write %s: %w", path, err)
	}
	return nil
}

func allZero(b []byte) bool {
	return len(bytes.Trim(b, "\x00")) == 0
}

// copyBytes writes b to a new file name.
func (l *Log) copyBytes(name string, b []byte) error {
	f, err := l.fs.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, l.opts.FileMode)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(b, 0)
	if err == nil && !l.opts.NoSync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// rewriteTail writes b at off and cuts the file there.
func rewriteTail(f file, off int64, b []byte) error {
	if _, err := f.WriteAt(b, off); err != nil {
		return err
	}
	return f.Truncate(off + int64(len(b)))
}

// fileSize is f's size, or -1 for no file or an error.
func fileSize(f file) int64 {
	if f == nil {
		return -1
	}
	info, err := f.Stat()
	if err != nil {
		return -1
	}
	return info.Size()
}
