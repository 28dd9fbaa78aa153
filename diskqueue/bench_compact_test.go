package diskqueue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// Compaction, side by side with a raw copy of the same segment, and
// lookups in a segment before and after it is compacted:
//
//	go test ./diskqueue -run '^$' -bench 'Compact|ReadAtCompacted' -count 5
//
// BenchmarkCompact's throughput is the input segment's log bytes per
// second: impl=compact is Log.Compact keeping every other record (every
// record read, checked and shown to keep; half of them written; the
// index and time index built; every step fsynced); impl=copy reads the
// same log file and writes it to a new file with one fsync, the least a
// rewrite of the segment can cost. Page cache warm in both.
func BenchmarkCompact(b *testing.B) {
	for _, size := range []int{100, 1000} {
		b.Run(fmt.Sprintf("size=%d/impl=compact", size), func(b *testing.B) {
			f := newCompactBench(b, size)
			keep := func(rec Record) bool { return rec.Seq%2 == 0 }
			b.SetBytes(f.segBytes)
			b.ReportAllocs()
			for b.Loop() {
				base := f.next(b)
				st, err := f.l.Compact(context.Background(), base, keep)
				if err != nil || st.Removed == 0 {
					b.Fatal(st, err)
				}
			}
		})
		b.Run(fmt.Sprintf("size=%d/impl=copy", size), func(b *testing.B) {
			f := newCompactBench(b, size)
			buf := make([]byte, compactBufferBytes)
			b.SetBytes(f.segBytes)
			b.ReportAllocs()
			for b.Loop() {
				base := f.next(b)
				if err := rawCopy(filepath.Join(f.dir, segmentName(base, logSuffix)), filepath.Join(f.dir, "copy"), buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// compactBench is a log of 16 MiB segments of records of one size, and
// the sealed segments not used yet.
type compactBench struct {
	dir      string
	l        *Log
	size     int
	todo     []uint64
	segBytes int64 // log bytes of one segment
}

const compactBenchSegment = 16 << 20

func newCompactBench(b *testing.B, size int) *compactBench {
	b.Helper()
	f := &compactBench{dir: b.TempDir(), size: size}
	var err error
	if f.l, err = OpenLog(f.dir, Options{MaxSegmentBytes: compactBenchSegment}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.l.Close() })
	f.fill(b)
	info, err := os.Stat(filepath.Join(f.dir, segmentName(f.todo[0], logSuffix)))
	if err != nil {
		b.Fatal(err)
	}
	f.segBytes = info.Size()
	return f
}

// fill empties the log and puts four sealed segments' worth of records.
func (f *compactBench) fill(b *testing.B) {
	if err := f.l.Empty(); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	body := make([]byte, f.size)
	for i := range body {
		body[i] = byte(i * 7)
	}
	start := len(f.l.Segments())
	for len(f.l.Segments()) < start+4 {
		if err := f.l.Put(ctx, body); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.l.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	f.todo = f.todo[:0]
	for _, s := range f.l.Segments() {
		if s.Sealed {
			f.todo = append(f.todo, s.Base)
		}
	}
}

// next returns a sealed segment not used yet, refilling the log (timer
// stopped) when there is none.
func (f *compactBench) next(b *testing.B) uint64 {
	if len(f.todo) == 0 {
		b.StopTimer()
		f.fill(b)
		b.StartTimer()
	}
	base := f.todo[0]
	f.todo = f.todo[1:]
	return base
}

// rawCopy reads from in chunks of len(buf) and writes them to a new file
// out, fsyncs it and removes it.
func rawCopy(from, to string, buf []byte) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	defer os.Remove(to)
	var off int64
	for {
		n, err := in.ReadAt(buf, off)
		if n > 0 {
			if _, werr := out.WriteAt(buf[:n], off); werr != nil {
				out.Close()
				return werr
			}
			off += int64(n)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			out.Close()
			return err
		}
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// BenchmarkReadAtCompacted: ReadAt of the records a compaction keeps (every
// other one), in a sealed segment of 100-byte records, before and after
// the compaction (target: the same cost, one index read and one log read),
// and of the records it removed (ErrCompacted, from the index alone).
func BenchmarkReadAtCompacted(b *testing.B) {
	f := newCompactBench(b, 100)
	seg := f.l.Segments()[0]
	count := int(seg.End - seg.Base)
	rng := rand.New(rand.NewPCG(1, 2))
	// read looks up random seqs of the segment with seq%2 == parity.
	read := func(b *testing.B, parity uint64, want error) {
		b.ReportAllocs()
		for b.Loop() {
			seq := seg.Base + uint64(rng.IntN(count-1))
			if seq%2 != parity {
				seq++
			}
			rec, err := f.l.ReadAt(seq)
			if !errors.Is(err, want) || want == nil && rec.Seq != seq {
				b.Fatal(seq, err)
			}
		}
	}
	b.Run("state=before/kept", func(b *testing.B) { read(b, 0, nil) })
	if _, err := f.l.Compact(context.Background(), seg.Base, func(rec Record) bool { return rec.Seq%2 == 0 }); err != nil {
		b.Fatal(err)
	}
	b.Run("state=after/kept", func(b *testing.B) { read(b, 0, nil) })
	b.Run("state=after/removed", func(b *testing.B) { read(b, 1, ErrCompacted) })
}
