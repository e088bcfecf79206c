package cache

import "math"

// keyIndex maps keys to slot numbers: open addressing with linear probing
// and backward-shift deletion, sized once so that it never grows (and so
// never allocates) after construction. It holds at most n keys.
type keyIndex struct {
	keys []Key
	vals []int32 // -1: empty
	mask uint64
	n    int
}

func newKeyIndex(n int) keyIndex {
	size := 8
	for size < 2*n {
		size <<= 1
	}
	ix := keyIndex{keys: make([]Key, size), vals: make([]int32, size), mask: uint64(size - 1)}
	for i := range ix.vals {
		ix.vals[i] = -1
	}
	return ix
}

func (ix *keyIndex) get(k Key) (int32, bool) {
	for i := k.hash() & ix.mask; ; i = (i + 1) & ix.mask {
		v := ix.vals[i]
		if v < 0 {
			return -1, false
		}
		if ix.keys[i] == k {
			return v, true
		}
	}
}

// put inserts or overwrites k.
func (ix *keyIndex) put(k Key, v int32) {
	for i := k.hash() & ix.mask; ; i = (i + 1) & ix.mask {
		if ix.vals[i] < 0 {
			ix.keys[i], ix.vals[i] = k, v
			ix.n++
			return
		}
		if ix.keys[i] == k {
			ix.vals[i] = v
			return
		}
	}
}

func (ix *keyIndex) del(k Key) bool {
	i := k.hash() & ix.mask
	for {
		if ix.vals[i] < 0 {
			return false
		}
		if ix.keys[i] == k {
			break
		}
		i = (i + 1) & ix.mask
	}
	// Backward-shift deletion keeps probe chains intact without tombstones.
	j := i
	for {
		j = (j + 1) & ix.mask
		if ix.vals[j] < 0 {
			break
		}
		home := ix.keys[j].hash() & ix.mask
		// Move j into the hole at i unless its home lies cyclically in (i, j].
		if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
			ix.keys[i], ix.vals[i] = ix.keys[j], ix.vals[j]
			i = j
		}
	}
	ix.vals[i] = -1
	ix.keys[i] = Key{}
	ix.n--
	return true
}

// history remembers the score of keys that are not resident (ghosts), in a
// fixed-size 8-way set-associative table: a full set forgets its entry with
// the lowest score. Bounded memory, no allocation after construction.
type history struct {
	keys []Key
	vals []float64 // -Inf: empty way
	mask uint64    // set index mask
}

const histWays = 8

func newHistory(entries int) history {
	sets := 1
	for sets*histWays < entries {
		sets <<= 1
	}
	h := history{keys: make([]Key, sets*histWays), vals: make([]float64, sets*histWays), mask: uint64(sets - 1)}
	for i := range h.vals {
		h.vals[i] = math.Inf(-1)
	}
	return h
}

// take returns and forgets k's score, or -Inf.
func (h *history) take(k Key) float64 {
	base := int(k.hash()&h.mask) * histWays
	for i := base; i < base+histWays; i++ {
		if h.keys[i] == k && !math.IsInf(h.vals[i], -1) {
			v := h.vals[i]
			h.vals[i] = math.Inf(-1)
			return v
		}
	}
	return math.Inf(-1)
}

// put records k's score, replacing k's entry, else an empty way, else the
// lowest score in the set if v beats it.
func (h *history) put(k Key, v float64) {
	if math.IsInf(v, -1) {
		return
	}
	base := int(k.hash()&h.mask) * histWays
	low := -1
	for i := base; i < base+histWays; i++ {
		if math.IsInf(h.vals[i], -1) {
			if low < 0 || !math.IsInf(h.vals[low], -1) {
				low = i
			}
			continue
		}
		if h.keys[i] == k {
			h.vals[i] = v
			return
		}
		if low < 0 || h.vals[i] < h.vals[low] {
			low = i
		}
	}
	if math.IsInf(h.vals[low], -1) || v > h.vals[low] {
		h.keys[low], h.vals[low] = k, v
	}
}
