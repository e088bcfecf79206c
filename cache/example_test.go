package cache_test

import (
	"context"
	"fmt"
	"log"

	"github.com/k3go/k3/cache"
)

// exampleLoader stands in for a disk read: it writes a short payload
// naming the expert into its slot and returns that part of the slot. It
// prints each call so that the examples show when a load happens.
func exampleLoader(_ context.Context, k cache.Key, slot []byte) ([]byte, error) {
	fmt.Println("load", k)
	n := copy(slot, "weights of "+k.String())
	return slot[:n], nil
}

// exampleGet requests k, prints its payload and releases it at once.
func exampleGet(c *cache.Cache, k cache.Key) {
	h, err := c.Get(context.Background(), k, exampleLoader)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s\n", h.Bytes()) // valid until Release
	h.Release()
}

// ExampleCache_Get fills a two-slot cache and shows a miss (a load), a hit
// (no load) and an eviction. LRU makes the victim easy to predict; the
// default policy (nil) is Adaptive.
func ExampleCache_Get() {
	c, err := cache.New(cache.Options{
		SlotSize: 4096,     // the largest expert, plus the loader's alignment slack
		Budget:   2 * 4096, // room for two slots
		Policy:   cache.NewLRU(),
	})
	if err != nil {
		log.Fatal(err)
	}
	a, b, d := cache.Key{Layer: 1, Expert: 7}, cache.Key{Layer: 1, Expert: 9}, cache.Key{Layer: 2, Expert: 0}
	exampleGet(c, a) // miss
	exampleGet(c, a) // hit
	exampleGet(c, b) // miss, into the free slot
	exampleGet(c, d) // miss: evicts a, the least recently used
	fmt.Println(c.Resident(a), c.Resident(b), c.Resident(d))

	s := c.Stats()
	fmt.Println(s.Slots, s.Requests, s.Hits, s.Misses, s.Evictions)
	// Output:
	// load L1/E7
	// weights of L1/E7
	// weights of L1/E7
	// load L1/E9
	// weights of L1/E9
	// load L2/E0
	// weights of L2/E0
	// false true true
	// 2 4 1 3 1
}

// ExampleCache_Prefetch reserves slots for a layer's experts at once and
// runs their loads separately (on I/O goroutines in the engine), then waits
// for each expert as it is needed. A handle pins its slot until Release.
func ExampleCache_Prefetch() {
	c, err := cache.New(cache.Options{SlotSize: 4096, Budget: 3 * 4096})
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	keys := []cache.Key{{Layer: 3, Expert: 1}, {Layer: 3, Expert: 4}}
	hs := make([]*cache.Handle, len(keys))

	var fills []cache.Fill
	if err := c.Prefetch(ctx, keys, hs, func(f cache.Fill) { fills = append(fills, f) }); err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(fills), "loads pending")
	for _, f := range fills { // here on this goroutine, in order
		if err := f.Run(ctx, exampleLoader); err != nil {
			log.Fatal(err)
		}
	}
	for _, h := range hs {
		p, err := h.Wait(ctx)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s\n", p)
		h.Release()
	}
	// Output:
	// 2 loads pending
	// load L3/E1
	// load L3/E4
	// weights of L3/E1
	// weights of L3/E4
}

// ExampleReplay compares replacement policies offline on a request trace.
// A cyclic scan over more experts than slots, as a pass over the layers
// makes, evicts every expert under LRU just before it is needed again;
// Adaptive keeps part of the set resident.
func ExampleReplay() {
	var trace []cache.Key
	for range 100 { // 100 passes over 6 layers, one expert each
		for layer := range int32(6) {
			trace = append(trace, cache.Key{Layer: layer})
		}
	}
	lru := cache.Replay(trace, 4, cache.NewLRU())
	adaptive := cache.Replay(trace, 4, cache.NewAdaptive(cache.AdaptiveOptions{}))
	fmt.Println(lru.Requests, lru.Hits, lru.Evictions)
	fmt.Println(adaptive.Hits > lru.Hits)
	// Output:
	// 600 0 596
	// true
}
