package cache_test

import (
	"math/rand/v2"
	"testing"

	"github.com/k3go/k3/cache"
)

// TestWindowOneIsLRU: the shipped policy with its window fixed at the whole
// cache is exactly LRU.
func TestWindowOneIsLRU(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	trace := make([]cache.Key, 50000)
	for i := range trace {
		trace[i] = cache.Key{Layer: int32(1 + i/16%20), Expert: int32(r.IntN(40))}
		if r.IntN(3) == 0 {
			trace[i].Expert = int32(r.IntN(4))
		}
	}
	for _, slots := range []int{1, 17, 64, 300} {
		lru := cache.Replay(trace, slots, cache.NewLRU())
		w1 := cache.Replay(trace, slots, cache.NewAdaptive(cache.AdaptiveOptions{Windows: []float64{1}}))
		if lru != w1 {
			t.Errorf("%d slots: LRU %+v, window 1 %+v", slots, lru, w1)
		}
	}
}

// TestAdaptiveLeavesLRU: on a cyclic scan larger than the cache (LRU's worst
// case) the policy must notice and move its window off LRU.
func TestAdaptiveLeavesLRU(t *testing.T) {
	var trace []cache.Key
	for range 30 {
		for l := int32(1); l <= 20; l++ {
			for e := range int32(16) {
				trace = append(trace, cache.Key{Layer: l, Expert: e})
			}
		}
	}
	p := cache.NewAdaptive(cache.AdaptiveOptions{})
	res := cache.Replay(trace, 200, p) // 320 keys cycle through 200 slots
	lru := cache.Replay(trace, 200, cache.NewLRU())
	if lru.Hits != 0 || p.Window() == 1 || res.HitRate() < 0.5 {
		t.Errorf("LRU hits %d; Adaptive window %v, hit rate %.3f", lru.Hits, p.Window(), res.HitRate())
	}
}
