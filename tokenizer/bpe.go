package tokenizer

import "sync"

// noRank marks a pair whose concatenation is not a token.
const noRank = ^uint32(0)

// maxShortPiece is the longest piece merged with tiktoken's quadratic scan;
// longer pieces (long Han runs, for one) use a heap, O(n log n).
const maxShortPiece = 16

// appendPiece appends the ids of the pre-token s[i:j] to dst.
func (t *Tokenizer) appendPiece(dst []int, s string, i, j int, sc *scratch) []int {
	if j-i == 1 {
		return append(dst, int(t.byteRank[s[i]]))
	}
	if r, ok := t.v.lookup(s, i, j); ok {
		return append(dst, int(r))
	}
	if j-i <= maxShortPiece {
		return t.bpeShort(dst, s, i, j, sc)
	}
	return t.bpeLong(dst, s, i, j, sc)
}

// pairRank returns the rank of s[i:j] or noRank.
func (t *Tokenizer) pairRank(s string, i, j int) uint32 {
	if r, ok := t.v.lookup(s, i, j); ok {
		return r
	}
	return noRank
}

type part struct {
	start int32  // offset in the piece
	pair  uint32 // rank of this part joined with the next, or noRank
	tok   uint32 // rank of this part
}

// scratch holds the working memory of the merges. One is taken from a
// pool per encoding call, so pieces cost no allocation; the pool lets the
// garbage collector reclaim it, and scratch grown for a huge piece is not
// kept.
type scratch struct {
	parts     []part
	next      []int32
	tok, pair []uint32
	heap      []uint64 // rank<<32 | offset: the minimum is the lowest rank, leftmost
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// maxPooledScratch bounds the piece length whose scratch is pooled.
const maxPooledScratch = 1 << 16

func getScratch() *scratch { return scratchPool.Get().(*scratch) }

func putScratch(sc *scratch) {
	if cap(sc.next) <= maxPooledScratch && cap(sc.heap) <= 3*maxPooledScratch {
		scratchPool.Put(sc)
	}
}

// bpeShort merges s[i:j] (2 <= j-i <= maxShortPiece) exactly as tiktoken
// does: repeatedly join the adjacent pair whose concatenated bytes have the
// lowest rank, the leftmost on a tie, until no concatenation is a token.
func (t *Tokenizer) bpeShort(dst []int, s string, i, j int, sc *scratch) []int {
	n := j - i
	sc.parts = resize(sc.parts, n+1)
	parts := sc.parts
	for k := range n {
		parts[k] = part{start: int32(k), pair: noRank, tok: t.byteRank[s[i+k]]}
		if k+2 <= n {
			parts[k].pair = t.pairRank(s, i+k, i+k+2)
		}
	}
	parts[n] = part{start: int32(n), pair: noRank}
	for {
		best, m := noRank, -1
		for k := range len(parts) - 1 {
			if parts[k].pair < best {
				best, m = parts[k].pair, k
			}
		}
		if m < 0 {
			break
		}
		// Join parts m and m+1; parts[m+2] starts the next part.
		parts[m].tok = best
		if m > 0 {
			parts[m-1].pair = t.pairRank(s, i+int(parts[m-1].start), i+int(parts[m+2].start))
		}
		parts[m].pair = noRank
		if m+3 < len(parts) {
			parts[m].pair = t.pairRank(s, i+int(parts[m].start), i+int(parts[m+3].start))
		}
		parts = append(parts[:m+1], parts[m+2:]...)
	}
	for k := range len(parts) - 1 {
		dst = append(dst, int(parts[k].tok))
	}
	return dst
}

// bpeLong gives the result of bpeShort for any length, with the parts in a
// linked list and the candidate pairs in a binary heap. A heap entry is
// stale when its part has died or its pair has changed; since ranks are
// unique per byte string and a part's pair only grows, comparing the
// stored rank with the current one detects both.
func (t *Tokenizer) bpeLong(dst []int, s string, i, j int, sc *scratch) []int {
	n := j - i
	if n > maxLongPiece {
		// Offsets are int32. A single pre-token this long (a 1 GiB run of
		// spaces, say) is merged in two halves: the only case where the
		// result can differ from tiktoken's.
		dst = t.bpeLong(dst, s, i, i+n/2, sc)
		return t.bpeLong(dst, s, i+n/2, j, sc)
	}
	sc.next = resize(sc.next, 2*n)
	sc.tok = resize(sc.tok, n)
	sc.pair = resize(sc.pair, n)
	next, prev, tok, pair := sc.next[:n], sc.next[n:], sc.tok, sc.pair
	h := sc.heap[:0]
	for k := range n {
		next[k], prev[k] = int32(k+1), int32(k-1)
		tok[k] = t.byteRank[s[i+k]]
		pair[k] = noRank
		if k+2 <= n {
			if r := t.pairRank(s, i+k, i+k+2); r != noRank {
				pair[k] = r
				h = append(h, uint64(r)<<32|uint64(k))
			}
		}
	}
	for k := len(h)/2 - 1; k >= 0; k-- {
		siftDown(h, k)
	}
	for len(h) > 0 {
		top := h[0]
		last := len(h) - 1
		h[0] = h[last]
		h = h[:last]
		if last > 0 {
			siftDown(h, 0)
		}
		r, k := uint32(top>>32), int32(uint32(top))
		if pair[k] != r {
			continue // stale
		}
		// Join part k with its successor nk.
		nk := next[k]
		tok[k] = r
		pair[nk] = noRank
		nn := next[nk]
		next[k] = nn
		if int(nn) < n {
			prev[nn] = k
		}
		pair[k] = noRank
		if int(nn) < n {
			if r := t.pairRank(s, i+int(k), i+int(next[nn])); r != noRank {
				pair[k] = r
				h = heapPush(h, uint64(r)<<32|uint64(k))
			}
		}
		if pk := prev[k]; pk >= 0 {
			pair[pk] = noRank
			if r := t.pairRank(s, i+int(pk), i+int(nn)); r != noRank {
				pair[pk] = r
				h = heapPush(h, uint64(r)<<32|uint64(pk))
			}
		}
	}
	sc.heap = h
	for k := int32(0); int(k) < n; k = next[k] {
		dst = append(dst, int(tok[k]))
	}
	return dst
}

// maxLongPiece is the longest piece bpeLong merges as a whole.
const maxLongPiece = 1 << 30

func resize[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}

func heapPush(h []uint64, x uint64) []uint64 {
	h = append(h, x)
	k := len(h) - 1
	for k > 0 {
		p := (k - 1) / 2
		if h[p] <= x {
			break
		}
		h[k] = h[p]
		k = p
	}
	h[k] = x
	return h
}

func siftDown(h []uint64, k int) {
	x := h[k]
	n := len(h)
	for {
		c := 2*k + 1
		if c >= n {
			break
		}
		if c+1 < n && h[c+1] < h[c] {
			c++
		}
		if x <= h[c] {
			break
		}
		h[k] = h[c]
		k = c
	}
	h[k] = x
}
