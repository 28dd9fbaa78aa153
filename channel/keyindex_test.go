package channel

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestKeyIndexModel: random inserts, removals, retains, lookups and clears against
// a Go map; entry numbers stay put while they live, a removed one's gen
// moves on, and the arena stays within about twice the live keys.
func TestKeyIndexModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	x := newKeyIndex()
	model := map[string]int32{} // key -> entry number
	ids := map[string]ID{}
	for step := range 200_000 {
		k := fmt.Sprintf("key-%d-%s", rng.IntN(5000), string(make([]byte, rng.IntN(40))))
		switch op := rng.IntN(10); {
		case op < 5:
			if _, ok := model[k]; ok {
				continue
			}
			id := ID(step + 1)
			n := x.insert([]byte(k), x.hash([]byte(k)))
			x.ents[n].id = id
			model[k], ids[k] = n, id
		case op < 8:
			n, ok := model[k]
			if !ok {
				continue
			}
			gen := x.ents[n].gen
			x.remove(n)
			if x.ents[n].live || x.ents[n].gen != gen+1 {
				t.Fatalf("step %d: removed entry %d is %+v", step, n, x.ents[n])
			}
			delete(model, k)
		case op < 9 && step%5000 == 0:
			x.clear()
			clear(model)
		case op == 9 && step%3000 < 10:
			// Keep the entries of even IDs.
			gens := map[int32]uint32{}
			for _, n := range model {
				gens[n] = x.ents[n].gen
			}
			x.retain(func(e *keyEntry) bool { return e.id%2 == 0 })
			for k, n := range model {
				switch e := x.ents[n]; {
				case ids[k]%2 == 0 && (!e.live || e.gen != gens[n]):
					t.Fatalf("step %d: retained entry %d is %+v", step, n, e)
				case ids[k]%2 != 0 && (e.live || e.gen != gens[n]+1):
					t.Fatalf("step %d: dropped entry %d is %+v", step, n, e)
				case ids[k]%2 != 0:
					delete(model, k)
				}
			}
		default:
		}
		if got := findKey(x, k); (got >= 0) != modelHas(model, k) {
			t.Fatalf("step %d: find(%q) = %d, model has %v", step, k, got, modelHas(model, k))
		}
		if modelHas(model, k) && (findKey(x, k) != model[k] || x.ents[model[k]].id != ids[k] || string(x.keyOf(model[k])) != k) {
			t.Fatalf("step %d: %q at %d, want %d with id %d", step, k, findKey(x, k), model[k], ids[k])
		}
		if step%1000 == 0 {
			// Removals move other keys' slots: every key is still found.
			for k, n := range model {
				if got := findKey(x, k); got != n {
					t.Fatalf("step %d: %q at %d, want %d", step, k, got, n)
				}
			}
		}
	}
	if x.live != len(model) {
		t.Fatalf("live %d, model %d", x.live, len(model))
	}
	for k, n := range model {
		if findKey(x, k) != n {
			t.Fatalf("%q lost", k)
		}
	}
	live := 0
	for k := range model {
		live += len(k)
	}
	if len(x.arena) > 2*live+64<<10 {
		t.Fatalf("arena %d bytes for %d bytes of live keys", len(x.arena), live)
	}
}

func modelHas(m map[string]int32, k string) bool { _, ok := m[k]; return ok }

func findKey(x *keyIndex, k string) int32 { return x.find([]byte(k), x.hash([]byte(k))) }
