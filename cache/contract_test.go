package cache_test

import (
	"math/rand/v2"
	"testing"

	"github.com/k3go/k3/cache"
	"github.com/k3go/k3/cache/internal/study"
)

var allPolicies = []namedPolicy{
	{"LRU", func() cache.Policy { return cache.NewLRU() }},
	{"Adaptive", func() cache.Policy { return cache.NewAdaptive(cache.AdaptiveOptions{}) }},
	{"Adaptive-window0", func() cache.Policy { return cache.NewAdaptive(cache.AdaptiveOptions{Windows: []float64{0}}) }},
	{"Adaptive-halflife1-sample16", func() cache.Policy {
		return cache.NewAdaptive(cache.AdaptiveOptions{HalfLife: 1, SampleSlots: 16, Windows: []float64{1, 0, 0.5}})
	}},
	{"ARC", func() cache.Policy { return study.NewARC() }},
	{"LayerLFU", func() cache.Policy { return study.NewLayerLFU() }},
}

// TestPolicyContract drives each policy through random sequences of the
// calls the cache makes, with slots pinned and released out of order and
// failed loads, against a model of which slots are evictable: Victim must
// return an evictable slot, and -1 only when there is none.
func TestPolicyContract(t *testing.T) {
	for _, np := range allPolicies {
		t.Run(np.name, func(t *testing.T) {
			for seed := range uint64(20) {
				r := rand.New(rand.NewPCG(seed, 7))
				slots := 1 + r.IntN(40)
				p := np.new()
				p.Reset(slots)
				const (
					empty = iota
					pinned
					evictable
				)
				state := make([]int, slots)
				pins := make([]int, slots)
				where := map[cache.Key]int{}
				keyOf := make([]cache.Key, slots)
				for range 3000 {
					layer := 1 + int32(r.IntN(6))
					k := cache.Key{Layer: layer, Expert: r.Int32N(20)}
					switch op := r.IntN(10); {
					case op < 6: // a request
						if s, ok := where[k]; ok {
							p.Access(k, s)
							if pins[s] == 0 {
								p.Pin(s)
								state[s] = pinned
							}
							pins[s]++
							continue
						}
						p.Access(k, -1)
						s := -1
						for i := range state {
							if state[i] == empty {
								s = i
								break
							}
						}
						if s < 0 {
							s = p.Victim()
							nEvictable := 0
							for i := range state {
								if state[i] == evictable {
									nEvictable++
								}
							}
							if s < 0 {
								if nEvictable > 0 {
									t.Fatalf("seed %d: Victim found nothing with %d evictable", seed, nEvictable)
								}
								continue
							}
							if state[s] != evictable {
								t.Fatalf("seed %d: Victim returned slot %d in state %d", seed, s, state[s])
							}
							delete(where, keyOf[s])
						}
						where[k], keyOf[s], state[s], pins[s] = s, k, pinned, 1
						p.Insert(s, k)
						if r.IntN(20) == 0 { // the load fails
							p.Remove(s)
							delete(where, k)
							state[s], pins[s] = empty, 0
						}
					default: // a release
						s := r.IntN(slots)
						if pins[s] > 0 {
							if pins[s]--; pins[s] == 0 {
								p.Unpin(s)
								state[s] = evictable
							}
						}
					}
				}
			}
		})
	}
}
