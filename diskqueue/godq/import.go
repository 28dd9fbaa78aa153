package godq

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	godiskqueue "github.com/nsqio/go-diskqueue"

	"github.com/spillq/spillq/diskqueue"
)

// A go-diskqueue queue named name in dataPath is these files (go-diskqueue's
// fileName and metaDataFileName):
//
//	name.diskqueue.meta.dat     text: depth, then readFileNum,readPos, then writeFileNum,writePos
//	name.diskqueue.NNNNNN.dat   records: int32 big-endian length, then the body
//
// The unread records start at readPos in file readFileNum and run to the
// end of file writeFileNum. go-diskqueue syncs its metadata lazily, so
// after a crash writePos can be short of the last file's end; go-diskqueue
// then reads the whole file, and so does the import.
const (
	metaSuffix = ".diskqueue.meta.dat"
	dataFormat = "%s.diskqueue.%06d.dat"
	// markerSuffix names the file that says an import is under way: its
	// presence at open means the last one was interrupted.
	markerSuffix = ".diskqueue.spillq-import"
	badSuffix    = ".bad" // go-diskqueue's name for a file set aside as damaged
)

// goMeta is the content of a go-diskqueue metadata file.
type goMeta struct {
	depth                  int64
	readFileNum, readPos   int64
	writeFileNum, writePos int64
}

func (m goMeta) String() string {
	return fmt.Sprintf("%d\n%d,%d\n%d,%d\n", m.depth, m.readFileNum, m.readPos, m.writeFileNum, m.writePos)
}

// importer moves a go-diskqueue backlog into a spillq queue, once. It runs
// in NewCompat, before the queue is handed out, on that one goroutine.
//
// Crash safety rests on two files and one count. The marker, written
// atomically before the first record is put, holds the queue's WriteSeq at
// that moment and the metadata it started from. The queue is written only
// by the import until NewCompat returns, so after a crash WriteSeq - start
// is exactly how many backlog records the queue kept, whatever the sync
// policy let the crash take; a resumed import skips that many and puts the
// rest. Every record is put once. The old files go only after a Sync, the
// metadata file first: without it no later open imports again, and a
// marker left without one just finishes the cleanup.
type importer struct {
	q              *diskqueue.Queue
	dataPath, name string
	minBody        int
	maxBody        int
	logf           godiskqueue.AppLogFunc
	// crashPoint, if set, is called at named moments of the import (see
	// the calls); a crash test's child kills itself there.
	crashPoint func(point string)
}

// errImport wraps every failure of the import.
var errImport = errors.New("godq: import of the go-diskqueue backlog")

func (im *importer) metaPath() string   { return filepath.Join(im.dataPath, im.name+metaSuffix) }
func (im *importer) markerPath() string { return filepath.Join(im.dataPath, im.name+markerSuffix) }
func (im *importer) dataFile(num int64) string {
	return filepath.Join(im.dataPath, fmt.Sprintf(dataFormat, im.name, num))
}

func (im *importer) crash(point string) {
	if im.crashPoint != nil {
		im.crashPoint(point)
	}
}

// pending reports whether there is a backlog to import or an interrupted
// import to finish.
func (im *importer) pending() bool {
	for _, path := range []string{im.metaPath(), im.markerPath()} {
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			return true // an error other than absence is run's to report
		}
	}
	return false
}

// run imports the backlog if there is one, and finishes an interrupted
// import.
func (im *importer) run(ctx context.Context) error {
	mk, haveMarker, err := im.readMarker()
	if err != nil {
		return err
	}
	meta, err := readMeta(im.metaPath())
	if errors.Is(err, os.ErrNotExist) {
		if haveMarker {
			// Interrupted after the metadata went: every record is in q.
			im.logf(godiskqueue.INFO, "DISKQUEUE(%s): finishing an interrupted import of a go-diskqueue backlog: removing its files", im.name)
			return im.retire(mk.meta, nil)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("%w: %w", errImport, err)
	}
	writeSeq := im.q.Stats().WriteSeq
	if haveMarker {
		if mk.meta != meta {
			return fmt.Errorf("%w: %s changed since an interrupted import began (was %q, now %q); move it aside to open the queue", errImport, im.metaPath(), mk.meta, meta)
		}
		if writeSeq < mk.start {
			return fmt.Errorf("%w: the queue's write position %d is behind %d, where an interrupted import began", errImport, writeSeq, mk.start)
		}
	} else {
		mk = marker{start: writeSeq, meta: meta}
		if err := im.writeMarker(mk); err != nil {
			return err
		}
	}
	im.crash("marker-written")
	done := writeSeq - mk.start // records an interrupted import already put
	im.logf(godiskqueue.INFO, "DISKQUEUE(%s): importing a go-diskqueue backlog (its metadata says %d records) from %s, files %06d to %06d", im.name, meta.depth, im.dataPath, meta.readFileNum, meta.writeFileNum)
	if done > 0 {
		im.logf(godiskqueue.INFO, "DISKQUEUE(%s): resuming an interrupted import of a go-diskqueue backlog after its first %d records", im.name, done)
	}

	var seen, put uint64
	damaged, err := im.each(meta, func(body []byte) error {
		seen++
		if seen <= done {
			return nil
		}
		if err := im.q.Put(ctx, body); err != nil {
			return fmt.Errorf("%w: record %d: %w", errImport, seen, err)
		}
		put++
		im.crash("put")
		return nil
	})
	if err != nil {
		return err
	}
	if err := im.q.Sync(ctx); err != nil {
		return fmt.Errorf("%w: %w", errImport, err)
	}
	im.crash("synced")
	if err := im.retire(meta, damaged); err != nil {
		return err
	}
	level := godiskqueue.INFO
	if seen != uint64(meta.depth) || len(damaged) > 0 {
		level = godiskqueue.WARN
	}
	im.logf(level, "DISKQUEUE(%s): imported a go-diskqueue backlog of %d records (its metadata said %d) from %s, files %06d to %06d, %d of them in this run; removed its files (%d damaged ones kept as %s)",
		im.name, seen, meta.depth, im.dataPath, meta.readFileNum, meta.writeFileNum, put, len(damaged), badSuffix)
	return nil
}

// each calls fn with every unread record of the backlog, in order. A file
// whose records stop making sense is read up to there, reported, and
// returned in damaged; go-diskqueue would skip the rest of it too.
func (im *importer) each(meta goMeta, fn func([]byte) error) (damaged []int64, err error) {
	for num := meta.readFileNum; num <= meta.writeFileNum; num++ {
		from := int64(0)
		if num == meta.readFileNum {
			from = meta.readPos
		}
		bad, err := im.eachInFile(num, num == meta.writeFileNum, from, fn)
		if err != nil {
			return nil, err
		}
		if bad != nil {
			im.logf(godiskqueue.WARN, "DISKQUEUE(%s): go-diskqueue file %s is damaged (%s); imported the records before the damage, the rest stays in %s", im.name, im.dataFile(num), bad, im.dataFile(num)+badSuffix)
			damaged = append(damaged, num)
		}
	}
	return damaged, nil
}

// eachInFile calls fn with the records of one data file from offset off;
// last says it is the write file. It returns a non-nil bad for damage, and
// err for a failure to read or from fn.
func (im *importer) eachInFile(num int64, last bool, off int64, fn func([]byte) error) (bad, err error) {
	path := im.dataFile(num)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		// go-diskqueue creates the write file on the first write after a
		// rotation, so the last may never have existed.
		if !last {
			im.logf(godiskqueue.WARN, "DISKQUEUE(%s): go-diskqueue file %s is missing; importing the files after it", im.name, path)
		}
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errImport, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errImport, err)
	}
	size := fi.Size()
	if off > size {
		return fmt.Errorf("read position %d is past the end of the file (%d bytes)", off, size), nil
	}
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return nil, fmt.Errorf("%w: %w", errImport, err)
	}
	r := bufio.NewReaderSize(f, 64<<10)
	var body []byte
	for off < size {
		var lenBuf [4]byte
		if size-off < 4 {
			return fmt.Errorf("%d bytes at offset %d are too short for a length", size-off, off), nil
		}
		if _, err := io.ReadFull(r, lenBuf[:]); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", errImport, path, err)
		}
		n := int64(int32(binary.BigEndian.Uint32(lenBuf[:])))
		// go-diskqueue's own check (readOne), before anything is allocated.
		if n < int64(im.minBody) || n > int64(im.maxBody) || n > size-off-4 {
			return fmt.Errorf("record length %d at offset %d is outside [%d, %d] or runs past the end", n, off, im.minBody, min(int64(im.maxBody), size-off-4)), nil
		}
		// Put does not keep its argument, so one buffer serves every record.
		if int64(cap(body)) < n {
			body = make([]byte, n)
		}
		body = body[:n]
		if _, err := io.ReadFull(r, body); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", errImport, path, err)
		}
		if err := fn(body); err != nil {
			return nil, err
		}
		off += 4 + n
	}
	return nil, nil
}

// retire removes the backlog's files once q holds every record: the
// metadata first (and fsynced away), so that from then on no open imports
// again; then the data files, keeping damaged ones as .bad as go-diskqueue
// does; the marker last.
func (im *importer) retire(meta goMeta, damaged []int64) error {
	for _, num := range damaged {
		if err := os.Rename(im.dataFile(num), im.dataFile(num)+badSuffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: %w", errImport, err)
		}
	}
	if err := os.Remove(im.metaPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %w", errImport, err)
	}
	if err := syncDir(im.dataPath); err != nil {
		return err
	}
	im.crash("meta-removed")
	for num := meta.readFileNum; num <= meta.writeFileNum; num++ {
		if err := os.Remove(im.dataFile(num)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: %w", errImport, err)
		}
	}
	// Files before readFileNum are consumed; go-diskqueue deletes them as it
	// goes, and one left by a crash would otherwise stay forever.
	for num := meta.readFileNum - 1; num >= 0; num-- {
		err := os.Remove(im.dataFile(num))
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if err != nil {
			return fmt.Errorf("%w: %w", errImport, err)
		}
	}
	if err := syncDir(im.dataPath); err != nil {
		return err
	}
	im.crash("data-removed")
	if err := os.Remove(im.markerPath()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %w", errImport, err)
	}
	return syncDir(im.dataPath)
}

// marker is the content of the marker file.
type marker struct {
	start uint64 // the queue's WriteSeq when the import began
	meta  goMeta // the go-diskqueue metadata it began from
}

const markerHeader = "spillq import of a go-diskqueue backlog, v1\n"

func (im *importer) readMarker() (marker, bool, error) {
	b, err := os.ReadFile(im.markerPath())
	if errors.Is(err, os.ErrNotExist) {
		return marker{}, false, nil
	}
	if err != nil {
		return marker{}, false, fmt.Errorf("%w: %w", errImport, err)
	}
	var m marker
	rest, ok := strings.CutPrefix(string(b), markerHeader)
	if ok {
		_, err = fmt.Sscanf(rest, "start %d\n%d\n%d,%d\n%d,%d\n", &m.start, &m.meta.depth, &m.meta.readFileNum, &m.meta.readPos, &m.meta.writeFileNum, &m.meta.writePos)
	}
	if !ok || err != nil {
		return marker{}, false, fmt.Errorf("%w: %s is not an import marker (%v); move it aside to open the queue", errImport, im.markerPath(), err)
	}
	return m, true, nil
}

// writeMarker stores m atomically: a temporary file, fsynced, renamed
// over, and the directory fsynced.
func (im *importer) writeMarker(m marker) error {
	tmp := im.markerPath() + ".tmp"
	content := fmt.Sprintf("%sstart %d\n%s", markerHeader, m.start, m.meta)
	if err := writeSynced(tmp, []byte(content)); err != nil {
		return fmt.Errorf("%w: %w", errImport, err)
	}
	if err := os.Rename(tmp, im.markerPath()); err != nil {
		return fmt.Errorf("%w: %w", errImport, err)
	}
	return syncDir(im.dataPath)
}

// writeSynced writes b to path and fsyncs it. The file is the owner's
// alone, as go-diskqueue's and the queue's own are: the marker holds no
// record, but nothing beside a queue need be readable by all.
func writeSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, diskqueue.DefaultFileMode)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func readMeta(path string) (goMeta, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return goMeta{}, err
	}
	var m goMeta
	if _, err := fmt.Sscanf(string(b), "%d\n%d,%d\n%d,%d\n", &m.depth, &m.readFileNum, &m.readPos, &m.writeFileNum, &m.writePos); err != nil {
		return goMeta{}, fmt.Errorf("%s is not a go-diskqueue metadata file: %w", path, err)
	}
	if m.readFileNum < 0 || m.readPos < 0 || m.writeFileNum < m.readFileNum {
		return goMeta{}, fmt.Errorf("%s holds impossible positions: %q", path, m)
	}
	return m, nil
}
