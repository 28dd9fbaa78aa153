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
	q, err := Open(b.TempDir(), opts)
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	ctx := context.Background()
	body := make([]byte, 100)
	const n = 256 * 64 << 10 / 150
	for i := 0; i < n; i++ {
		if err := q.Put(ctx, body); err != nil {
			b.Fatal(err)
		}
	}
	if err := q.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	readAtRandom(b, q, rand.New(rand.NewPCG(1, 2)), n)
}
