package diskqueue

import (
	"context"
	"math/rand/v2"
	"testing"
)

// BenchmarkReadAtReopened is ReadAt at random over many more sealed
// segments than the cache keeps open (maxOpenSealed, here 8 of 256), so
// nearly every lookup opens its segment's files again, as one over a
// backlog of a few hundred GB in 100 MiB segments would.
//
//	go test ./diskqueue -run '^$' -bench ReadAtReopened -count 6
func BenchmarkReadAtReopened(b *testing.B) {
	opts := Options{NoSync: true, RetainBytes: 1 << 40, MaxSegmentBytes: 64 << 10, openSealedForTesting: 8}
	const n = 256 * 64 << 10 / 150
	q := putBench(b, b.TempDir(), opts, n)
	defer q.Close()
	if err := q.Sync(context.Background()); err != nil {
		b.Fatal(err)
	}
	readAtRandom(b, q, rand.New(rand.NewPCG(1, 2)), n)
}
