package cache

// ReplayResult counts what a replay saw.
type ReplayResult struct {
	Requests, Hits, Evictions int64
}

// HitRate is Hits / Requests.
func (r ReplayResult) HitRate() float64 {
	if r.Requests == 0 {
		return 0
	}
	return float64(r.Hits) / float64(r.Requests)
}

// Replay runs a request trace through p as a cache of the given number of
// slots would, one request at a time with every load completing at once,
// and counts the hits (a request for a resident key). It drives p through
// exactly the calls the cache makes, so a policy's replayed hit rate is the
// one it gets in the cache for the same request order. Replay calls p.Reset.
func Replay(trace []Key, slots int, p Policy) ReplayResult {
	p.Reset(slots)
	ix := newKeyIndex(slots)
	keys := make([]Key, slots)
	next := 0
	var r ReplayResult
	for _, k := range trace {
		r.Requests++
		if s, ok := ix.get(k); ok {
			r.Hits++
			p.Access(k, int(s))
			p.Pin(int(s))
			p.Unpin(int(s))
			continue
		}
		p.Access(k, -1)
		var s int
		if next < slots {
			s = next
			next++
		} else {
			s = p.Victim()
			if s < 0 {
				panic("cache: Replay: policy found no victim with every slot evictable")
			}
			ix.del(keys[s])
			r.Evictions++
		}
		ix.put(k, int32(s))
		keys[s] = k
		p.Insert(s, k)
		p.Unpin(s)
	}
	return r
}
