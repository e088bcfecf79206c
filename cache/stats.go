package cache

// Stats counts what a cache has done. Every request ends as exactly one of
// Hits, InflightWaits, Misses or Canceled, so
// Requests = Hits + InflightWaits + Misses + Canceled.
type Stats struct {
	Slots  int // number of slots
	Stride int // bytes between slot starts

	Requests int64
	// Hits counts requests that found their expert resident and loaded.
	Hits int64
	// InflightWaits counts requests that found their expert being loaded
	// and joined that load. They are not hits: the bytes were not in memory
	// when asked for (a prefetch issued microseconds earlier would otherwise
	// show as a ~100% "hit rate").
	InflightWaits int64
	// Misses counts requests that started a load.
	Misses int64
	// Canceled counts requests whose context ended while they waited for a
	// free slot.
	Canceled int64

	Evictions  int64
	LoadErrors int64
	// SlotWaits counts requests that had to wait because every slot was
	// pinned or loading.
	SlotWaits int64
	// BytesLoaded sums the payload lengths of successful loads.
	BytesLoaded int64

	// Resident and Loading are the slots holding a loaded expert and a load
	// in flight at the time of the snapshot; Pinned counts slots with a
	// holder (loading ones included).
	Resident, Loading, Pinned int
}

// HitRate is Hits / Requests, the resident hit rate.
func (s Stats) HitRate() float64 {
	if s.Requests == 0 {
		return 0
	}
	return float64(s.Hits) / float64(s.Requests)
}

// Stats returns a consistent snapshot of the counters. It takes the cache's
// lock for a copy; it does not allocate.
func (c *Cache) Stats() Stats {
	c.mu.Lock()
	s := c.st
	c.mu.Unlock()
	return s
}
