package cache

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestKeyIndex checks the open-addressing index against a map under
// random inserts and deletes at full load.
func TestKeyIndex(t *testing.T) {
	for _, n := range []int{1, 3, 17, 100} {
		ix := newKeyIndex(n)
		ref := map[Key]int32{}
		r := rand.New(rand.NewPCG(uint64(n), 1))
		for i := range 20000 {
			k := Key{Layer: r.Int32N(4), Expert: r.Int32N(int32(3 * n))}
			if _, ok := ref[k]; ok && r.IntN(2) == 0 {
				delete(ref, k)
				if !ix.del(k) {
					t.Fatalf("n=%d: del(%v) found nothing", n, k)
				}
			} else if len(ref) < n {
				ref[k] = int32(i)
				ix.put(k, int32(i))
			}
			if ix.n != len(ref) {
				t.Fatalf("n=%d: %d keys, want %d", n, ix.n, len(ref))
			}
			if i%97 == 0 {
				for kk, v := range ref {
					if got, ok := ix.get(kk); !ok || got != v {
						t.Fatalf("n=%d: get(%v) = %d, %v; want %d", n, kk, got, ok, v)
					}
				}
				if _, ok := ix.get(Key{Layer: -1}); ok {
					t.Fatal("absent key found")
				}
			}
		}
	}
}

func TestHistory(t *testing.T) {
	h := newHistory(8) // one set of 8 ways
	for e := range int32(8) {
		h.put(Key{1, e}, float64(e))
	}
	h.put(Key{1, 100}, 0.5) // evicts the lowest, Key{1,0} with 0
	if v := h.take(Key{1, 0}); !math.IsInf(v, -1) {
		t.Errorf("lowest entry kept: %v", v)
	}
	h.put(Key{1, 101}, -3) // lower than everything: not kept
	if v := h.take(Key{1, 101}); !math.IsInf(v, -1) {
		t.Errorf("entry lower than the set kept: %v", v)
	}
	h.put(Key{1, 5}, 9) // update in place
	if v := h.take(Key{1, 5}); v != 9 {
		t.Errorf("updated entry: %v", v)
	}
	if v := h.take(Key{1, 5}); !math.IsInf(v, -1) {
		t.Errorf("take twice: %v", v)
	}
	if v := h.take(Key{1, 100}); v != 0.5 {
		t.Errorf("entry: %v", v)
	}
}
