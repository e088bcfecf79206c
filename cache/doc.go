// Package cache is k3's byte-budgeted cache of routed-expert weights.
//
// # Slots and the arena
//
// All experts of a model have the same size, so the cache is an arena of
// fixed-size slots: New takes a slot size S and a budget B (or a caller's
// arena) and makes floor(B/stride) slots, where stride is S rounded up to
// [Align] (4096). Slot i starts at arena[i*stride], so every slot is
// 4096-aligned when the arena is, as O_DIRECT needs. A [Loader] reads an
// expert into its slot and returns the payload, a sub-slice that may start at
// an offset (an O_DIRECT read begins at the aligned window below the expert)
// and need not be a multiple of 4096.
//
// # Requests
//
// [Cache.Get] returns a pinned [Handle]; a pinned slot is never evicted, and
// [Handle.Release] unpins it. A request for an expert whose load is in
// flight waits for that load rather than reading it again. When every slot is
// pinned or loading, a request waits (until a release, or until its context
// ends) rather than failing or exceeding the budget, so the cache needs more
// slots than the handles held at once: TopK+1 slots for a model routing each
// token to TopK experts (see [Options.MinSlots]). A failed load leaves its
// slot empty, every request waiting on it gets the error, and the next
// request retries.
//
// [Cache.Start] and [Cache.Prefetch] split a request in two so that the
// engine can issue a layer's expert reads as soon as routing is known and
// compute each expert as it arrives: they reserve slots without waiting for
// I/O and hand back [Fill] values, whose Run performs the read on whatever
// goroutine the caller chooses (the I/O layer bounds its own queue depth);
// [Handle.Wait] then waits for one expert. The cache starts no goroutines.
//
// The hot paths do not allocate once warm: handles are recycled, the key
// index and the policy's structures are sized at New.
//
// # Replacement policy
//
// The policy is pluggable ([Policy]); [LRU] is provided for comparison, and
// the default is [Adaptive]. On a model whose requests cycle through the
// layers, a working set larger than the cache makes LRU evict every expert
// just before it is needed again (on the reference trace, LRU keeps 36.2% at
// every capacity from 256 to 4,096 experts: only repeats within a step).
// Adaptive ranks experts by request counts that decay per pass over the
// layers, keeps a newcomer only if its history beats the weakest incumbent's
// (so a stable set survives the scan), protects the experts of the layer
// being run, and sizes a recency window in front of all that by simulating
// candidate window sizes on a sample of keys, so that it falls back to LRU's
// behaviour where recency is what pays. docs/perf-cache.md has the study;
// [Replay] reproduces it for any policy and trace.
//
// # Statistics
//
// [Cache.Stats] counts requests, resident hits, requests that joined a load
// in flight (InflightWaits: not hits), misses, evictions, load errors, waits
// for a slot and bytes loaded.
package cache
