package tokenizer

import (
	"math/bits"
	"math/rand/v2"
)

// vocab maps token bytes to ranks with open addressing over one byte arena.
//
// Keys of up to 8 bytes are stored packed in the slot, so a probe compares
// two integers and never touches the arena; longer keys store their 64-bit
// hash and are confirmed against the arena. Lookups take the key as a
// substring s[i:j] of a longer string, so no piece is ever copied.
type vocab struct {
	pair2  *[1 << 16]uint32 // ranks of the two-byte tokens, noRank where none
	slots  []slot
	mask   uint64
	seed   uint64
	arena  string   // all token bytes, ordinary and added
	toks   []tokRef // by id; n == 0 means no token has this id
	maxLen int      // length of the longest key
}

type slot struct {
	key  uint64 // packed bytes (n <= 8) or hash (n > 8)
	n    uint32 // key length; 0 marks an empty slot
	rank uint32
}

type tokRef struct {
	off, n uint32
}

const (
	hashM1 = 0xa0761d6478bd642f
	hashM2 = 0xe7037ed1a0b428db
	hashM3 = 0x8ebc6af09c88c6e3
)

func mix(a, b uint64) uint64 {
	hi, lo := bits.Mul64(a, b)
	return hi ^ lo
}

// load64 returns s[i:i+8] as a little-endian integer.
func load64(s string, i int) uint64 {
	s = s[i : i+8]
	return uint64(s[0]) | uint64(s[1])<<8 | uint64(s[2])<<16 | uint64(s[3])<<24 |
		uint64(s[4])<<32 | uint64(s[5])<<40 | uint64(s[6])<<48 | uint64(s[7])<<56
}

// keyHash returns the slot key and the hash of s[i:j], 0 < j-i.
func (v *vocab) keyHash(s string, i, j int) (key, h uint64) {
	n := j - i
	if n <= 8 {
		switch {
		case i+8 <= len(s):
			key = load64(s, i) & (^uint64(0) >> (64 - 8*uint(n)))
		case j >= 8:
			key = load64(s, j-8) >> (64 - 8*uint(n))
		default:
			for k := j - 1; k >= i; k-- {
				key = key<<8 | uint64(s[k])
			}
		}
		return key, mix(key^v.seed, hashM1^uint64(n))
	}
	h = v.seed ^ uint64(n)*hashM3
	for ; j-i > 8; i += 8 {
		h = mix(h^load64(s, i), hashM1)
	}
	h = mix(h^load64(s, j-8), hashM2)
	return h, h
}

// lookup returns the rank of the token s[i:j], 0 <= i < j <= len(s).
func (v *vocab) lookup(s string, i, j int) (uint32, bool) {
	var key, h uint64
	switch n := j - i; {
	case n == 2:
		r := v.pair2[uint16(s[i])|uint16(s[i+1])<<8]
		return r, r != noRank
	case n > v.maxLen:
		return 0, false
	case n <= 8 && i+8 <= len(s):
		// The common case, inlined: one load, one multiply.
		key = load64(s, i) & (^uint64(0) >> (64 - 8*uint(n)))
		h = mix(key^v.seed, hashM1^uint64(n))
	default:
		key, h = v.keyHash(s, i, j)
	}
	n := uint32(j - i)
	for idx := h & v.mask; ; idx = (idx + 1) & v.mask {
		sl := &v.slots[idx]
		if sl.n == n && sl.key == key {
			if n <= 8 {
				return sl.rank, true
			}
			r := v.toks[sl.rank]
			if v.arena[r.off:r.off+r.n] == s[i:j] {
				return sl.rank, true
			}
		} else if sl.n == 0 {
			return 0, false
		}
	}
}

// initSlots sizes the table for n keys at a load factor of at most 1/2.
func (v *vocab) initSlots(n int) {
	size := 16
	for size < 2*n {
		size <<= 1
	}
	v.slots = make([]slot, size)
	v.mask = uint64(size - 1)
	v.seed = rand.Uint64()
}

// initPair2 fills the table of two-byte tokens; call it after insert.
func (v *vocab) initPair2() {
	v.pair2 = new([1 << 16]uint32)
	for k := range v.pair2 {
		v.pair2[k] = noRank
	}
	for _, sl := range v.slots {
		if sl.n == 2 {
			v.pair2[uint16(sl.key)] = sl.rank
		}
	}
}

// insert adds the token with the given rank, whose bytes are already in the
// arena at toks[rank]. It reports false, and changes nothing, if the same
// bytes are already present; their rank is returned.
func (v *vocab) insert(rank uint32) (uint32, bool) {
	r := v.toks[rank]
	i, j := int(r.off), int(r.off+r.n)
	v.maxLen = max(v.maxLen, int(r.n))
	key, h := v.keyHash(v.arena, i, j)
	for idx := h & v.mask; ; idx = (idx + 1) & v.mask {
		sl := &v.slots[idx]
		if sl.n == 0 {
			*sl = slot{key: key, n: r.n, rank: rank}
			return rank, true
		}
		if sl.n == r.n && sl.key == key {
			o := v.toks[sl.rank]
			if r.n <= 8 || v.arena[o.off:o.off+o.n] == v.arena[i:j] {
				return sl.rank, false
			}
		}
	}
}

// bytesOf returns the bytes of token id, or false.
func (v *vocab) bytesOf(id int) (string, bool) {
	if uint(id) >= uint(len(v.toks)) {
		return "", false
	}
	r := v.toks[id]
	if r.n == 0 {
		return "", false
	}
	return v.arena[r.off : r.off+r.n], true
}
