package channel

import (
	"strconv"
	"testing"
	"time"
)

// BenchmarkKeyTable: one keyed Put's and its finish's bookkeeping (admit,
// commit, done) under each Put-time policy, with about 1,000 keys pending.
func BenchmarkKeyTable(b *testing.B) {
	keys := make([][]byte, 1<<16)
	for i := range keys {
		keys[i] = []byte("order-" + strconv.Itoa(i))
	}
	for _, p := range []KeyPolicy{KeyUnique, KeyReplace, KeyDedup} {
		b.Run(p.String(), func(b *testing.B) {
			t, _ := newKeyTable(p, time.Millisecond, nil, nil)
			b.ReportAllocs()
			i := 0
			now := time.Now().UnixNano()
			for b.Loop() {
				k := keys[i%len(keys)]
				id := ID(i + 1)
				a, err := t.admit(k, id, now+int64(i)*1000)
				if err != nil {
					b.Fatal(err)
				}
				t.commit(a, id, uint64(i), srcBackend)
				if i >= 1000 {
					old := i - 1000
					t.done(keys[old%len(keys)], ID(old+1))
				}
				i++
			}
		})
	}
}
