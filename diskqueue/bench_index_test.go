package diskqueue

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"testing"
)

// Lookup by seq, three ways, on queues of 10 thousand, 1 million and 10
// million 100-byte records (page cache warm):
//
//   - impl=index: ReadAt, one read of the dense sequence index and one of
//     the log;
//
//   - impl=kafka: Kafka's way, a sparse offset index with an entry every
//     4 KiB of log (kept in memory here, which flatters it), then a scan of
//     the log from that entry;
//
//   - impl=scan: a sequential scan from the first record (10 k and 1 M
//     only: at 10 M a lookup reads over a gigabyte);
//
//   - impl=floor: not a lookup, the memory one must touch: the index entry
//     and the first and last byte of the frame it points at, loaded from
//     the same mappings with no lock, check or copy, each lookup after the
//     last one's loads have returned. What impl=index costs
//     above it is ReadAt's own; what it costs more at 10 M than at 10 k is
//     the cache and TLB misses of touching 1.3 GB at random.
//
//     go test ./diskqueue -run '^$' -bench Lookup -count 6
func BenchmarkLookup(b *testing.B) {
	for _, n := range []int{10_000, 1_000_000, 10_000_000} {
		q := lookupFixture(b, n)
		rng := rand.New(rand.NewPCG(1, 2))
		b.Run(fmt.Sprintf("records=%d/impl=index", n), func(b *testing.B) { readAtRandom(b, q, rng, n) })
		b.Run(fmt.Sprintf("records=%d/impl=floor", n), func(b *testing.B) {
			segs, maps := lookupMaps(b, q)
			var sink byte
			for b.Loop() {
				// Through sink, each lookup waits for the last one's
				// loads, as ReadAt's calls do: latency, not throughput.
				seq := (uint64(rng.IntN(n)) + uint64(sink)) % uint64(n)
				i := sort.Search(len(segs), func(i int) bool { return segs[i].base > seq }) - 1
				m := maps[i]
				off, _ := indexOffset(binary.BigEndian.Uint32(m.index[indexEntryAt(int64(seq-segs[i].base)):]), false)
				sink ^= m.log[off] ^ m.log[off+recordHeaderSize+99]
			}
			benchSinkByte = sink
		})
		sparse := buildSparseIndex(b, q)
		b.Run(fmt.Sprintf("records=%d/impl=kafka", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				seq := uint64(rng.IntN(n))
				if got := sparse.lookup(b, q, seq); got != seq {
					b.Fatalf("kafka lookup of %d found %d", seq, got)
				}
			}
		})
		if n <= 1_000_000 {
			b.Run(fmt.Sprintf("records=%d/impl=scan", n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					seq := uint64(rng.IntN(n))
					for rec, err := range q.Scan(0, seq+1) {
						if err != nil {
							b.Fatal(err)
						}
						if rec.Seq == seq {
							break
						}
					}
				}
			})
		}
		q.Close()
	}
}

// readAtRandom times ReadAt of seqs below n, drawn from rng.
func readAtRandom(b *testing.B, q *Queue, rng *rand.Rand, n int) {
	b.ReportAllocs()
	for b.Loop() {
		seq := uint64(rng.IntN(n))
		rec, err := q.ReadAt(seq)
		if err != nil || rec.Seq != seq {
			b.Fatal(seq, err)
		}
	}
}

func lookupFixture(b *testing.B, n int) *Queue {
	b.Helper()
	q := putBench(b, b.TempDir(), Options{NoSync: true, RetainBytes: 1 << 40}, n)
	if err := q.Sync(context.Background()); err != nil {
		b.Fatal(err)
	}
	return q
}

var benchSinkByte byte

// segMaps are one segment's log and index mappings.
type segMaps struct{ log, index []byte }

// lookupMaps returns q's segments and the mappings ReadAt reads them
// through, held until b ends (the cache may give back those nobody holds).
func lookupMaps(b *testing.B, q *Queue) ([]*segment, []segMaps) {
	b.Helper()
	segs := q.segs
	maps := make([]segMaps, len(segs))
	for i, seg := range segs {
		f, err := q.acquireFiles(seg)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(f.release)
		maps[i].log, maps[i].index = f.maps(q.Log, seg)
		if maps[i].log == nil || maps[i].index == nil {
			b.Skip("segments are not mapped here")
		}
	}
	return segs, maps
}

// sparseIndex is Kafka's offset index: (seq, segment, offset) every 4 KiB.
type sparseIndex struct {
	seqs []uint64
	segs []*segment
	offs []int64
}

func buildSparseIndex(b *testing.B, q *Queue) *sparseIndex {
	b.Helper()
	var si sparseIndex
	for _, seg := range q.segs {
		f, err := q.acquireFiles(seg)
		if err != nil {
			b.Fatal(err)
		}
		sc := newScanner(f.log, fileHeaderSize, seg.base, seg.sizeNow())
		last := int64(-1 << 40)
		for sc.Next() {
			off, h, _ := sc.Record()
			if off-last >= 4096 {
				si.seqs = append(si.seqs, h.seq)
				si.segs = append(si.segs, seg)
				si.offs = append(si.offs, off)
				last = off
			}
		}
		f.release()
	}
	return &si
}

// lookup binary-searches the sparse entries, then reads the log from the
// entry in 4 KiB chunks, decoding frames until it reaches seq.
func (si *sparseIndex) lookup(b *testing.B, q *Queue, seq uint64) uint64 {
	i := sort.Search(len(si.seqs), func(i int) bool { return si.seqs[i] > seq }) - 1
	seg, off := si.segs[i], si.offs[i]
	w := window{chunk: 4096}
	f, err := q.acquireFiles(seg)
	if err != nil {
		b.Fatal(err)
	}
	defer f.release()
	w.reset(f.log)
	limit := seg.sizeNow()
	for off < limit {
		h, _, n, err := w.frameAt(off, limit, DefaultMaxRecordBytes)
		if err != nil && err != io.EOF {
			b.Fatal(err)
		}
		if h.seq == seq {
			return h.seq
		}
		off += int64(n)
	}
	return maxSeq
}

// BenchmarkIndexCost: Put throughput with and without maintaining the
// sequence and time indexes, and the index bytes each record costs.
//
//	go test ./diskqueue -run '^$' -bench IndexCost -count 6
func BenchmarkIndexCost(b *testing.B) {
	body := make([]byte, 100)
	for _, noIndex := range []bool{false, true} {
		name := "index=on"
		if noIndex {
			name = "index=off"
		}
		b.Run("size=100/"+name, func(b *testing.B) {
			q, err := Open(b.TempDir(), Options{noIndexForTesting: noIndex})
			if err != nil {
				b.Fatal(err)
			}
			defer q.Close()
			ctx := context.Background()
			b.SetBytes(100)
			b.ReportAllocs()
			for b.Loop() {
				if err := q.Put(ctx, body); err != nil {
					b.Fatal(err)
				}
			}
			if err := q.Sync(ctx); err != nil {
				b.Fatal(err)
			}
			var idx, tidx int64
			for _, s := range q.segs {
				idx += s.indexBytes.Load() - fileHeaderSize
				tidx += s.timeIndexBytes.Load() - fileHeaderSize
			}
			n := float64(q.Stats().WriteSeq)
			b.ReportMetric(float64(idx)/n, "index-B/record")
			b.ReportMetric(float64(tidx)/n, "timeindex-B/record")
		})
	}
}
