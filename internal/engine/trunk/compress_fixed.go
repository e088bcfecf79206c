package trunk

import (
	"encoding/binary"
	"math/bits"
	"slices"

	"github.com/k3go/k3/internal/platform/kernel/expunpack"
)

// The fixed-width exponent mode (compExpFix) trades a few percent of size
// for a decode several times faster than huff0's: trained and normal BF16
// weights put almost all their values in a handful of octaves, so each
// exponent becomes a k-bit index (k = 3 or 4) into a per-block table of
// the 2^k − 1 most frequent exponent bytes, the last index being an escape
// whose exponent byte follows in a list, consumed in order. Decoding is a
// table lookup per 12 (k = 3) or 8 (k = 4) bits of codes; escapes are rare
// (≈ 3% of normal weights at k = 3), so their branch is mostly not taken.
//
// The exponent stream of a compExpFix block:
//
//	k (1 byte) | table (2^k − 1 bytes) | escape count (uint32 LE) |
//	codes (fixedCodeBytes(n, k) bytes, little-endian bit order) | escapes
//
// Codes fill whole groups (8 codes in 3 bytes at k = 3, 2 in a byte at
// k = 4); the fields of a last partial group past n are padding, ignored.

// fixedSlack is how much bigger than huff0's a whole stored block may be
// and still take the fixed-width mode: the block's sign+mantissa half
// does not shrink, so 6% of block bytes is about 0.04 of the raw size on
// normal weights (0.70 against huff0's 0.662) for a decode that is no
// longer bound by the entropy coder.
const fixedSlack = 0.06

// preferFixed reports whether a block of n words stores its exponents in
// the fixed-width mode (fixLen bytes) rather than in huffLen bytes
// (huff0's stream, or n when stored raw).
func preferFixed(fixLen, huffLen, n int) bool {
	if fixLen >= n { // never bigger than the raw exponents
		return false
	}
	return float64(compHeader+fixLen+n) <= (1+fixedSlack)*float64(compHeader+huffLen+n)
}

// fixedCodeBytes is the length of the code fields for n exponents.
func fixedCodeBytes(n, k int) int {
	if k == 3 {
		return (n + 7) / 8 * 3
	}
	return (n + 1) / 2
}

// encodeFixed appends exp's fixed-width stream to dst, with whichever of
// k = 3 and k = 4 is shorter.
func encodeFixed(dst, exp []byte) []byte {
	var hist [256]int
	for _, e := range exp {
		hist[e]++
	}
	var order [256]byte
	for i := range order {
		order[i] = byte(i)
	}
	// Most frequent first; ties by value, so a block always encodes alike.
	slices.SortStableFunc(order[:], func(a, b byte) int { return hist[b] - hist[a] })
	n, best, bestLen := len(exp), 3, 0
	for k := 3; k <= 4; k++ {
		t := 1<<k - 1
		esc := n
		for _, v := range order[:t] {
			esc -= hist[v]
		}
		if l := 1 + t + 4 + fixedCodeBytes(n, k) + esc; k == 3 || l < bestLen {
			best, bestLen = k, l
		}
	}
	k, t := best, 1<<best-1
	var code [256]byte
	for i := range code {
		code[i] = byte(t) // the escape
	}
	for i, v := range order[:t] {
		code[v] = byte(i)
	}
	start := len(dst)
	dst = append(dst, byte(k))
	dst = append(dst, order[:t]...)
	dst = append(dst, 0, 0, 0, 0) // escape count, set below
	codes := len(dst)
	dst = append(dst, make([]byte, fixedCodeBytes(n, k))...)
	c := dst[codes:]
	nesc := 0
	for i, e := range exp {
		v := code[e]
		if int(v) == t {
			nesc++
		}
		if k == 3 {
			bit := 24*(i/8) + 3*(i%8)
			w := uint32(v) << (bit % 8)
			c[bit/8] |= byte(w)
			if bit/8+1 < len(c) {
				c[bit/8+1] |= byte(w >> 8)
			}
		} else {
			c[i/2] |= v << (4 * (i % 2))
		}
	}
	binary.LittleEndian.PutUint32(dst[start+1+t:], uint32(nesc))
	for _, e := range exp {
		if int(code[e]) == t {
			dst = append(dst, e)
		}
	}
	return dst
}

// fixedTables are a decoder's lookup tables for the last table it saw;
// consecutive blocks of a tensor mostly share their table, and then the
// tables are not rebuilt.
type fixedTables struct {
	k     int
	table [15]byte
	lut3  *[4096]uint32 // 4 codes (12 bits) -> 4 exponent bytes
	esc3  *[4096]uint8  // which of the 4 are escapes
	lut4  *[256]uint16  // 2 codes (8 bits) -> 2 exponent bytes
	esc4  *[256]uint8
}

func (f *fixedTables) build(k int, table []byte) {
	if f.k == k && string(f.table[:len(table)]) == string(table) {
		return
	}
	f.k = k
	copy(f.table[:], table)
	t := 1<<k - 1
	if k == 3 {
		if f.lut3 == nil {
			f.lut3, f.esc3 = new([4096]uint32), new([4096]uint8)
		}
		for i := range f.lut3 {
			var w uint32
			var m uint8
			for j := range 4 {
				v := i >> (3 * j) & 7
				if v == t {
					m |= 1 << j
				} else {
					w |= uint32(table[v]) << (8 * j)
				}
			}
			f.lut3[i], f.esc3[i] = w, m
		}
		return
	}
	if f.lut4 == nil {
		f.lut4, f.esc4 = new([256]uint16), new([256]uint8)
	}
	for i := range f.lut4 {
		var w uint16
		var m uint8
		for j := range 2 {
			v := i >> (4 * j) & 15
			if v == t {
				m |= 1 << j
			} else {
				w |= uint16(table[v]) << (8 * j)
			}
		}
		f.lut4[i], f.esc4[i] = w, m
	}
}

// decode decodes the fixed-width stream es into exp, reporting false for
// a stream that is not one: a bad k, lengths that do not add up, or an
// escape count that differs from the escapes its codes use.
func (f *fixedTables) decode(exp, es []byte) bool {
	n := len(exp)
	if len(es) < 1 {
		return false
	}
	k := int(es[0])
	if k != 3 && k != 4 {
		return false
	}
	t := 1<<k - 1
	head := 1 + t + 4
	if len(es) < head {
		return false
	}
	nesc := int(binary.LittleEndian.Uint32(es[1+t:]))
	nc := fixedCodeBytes(n, k)
	if nesc > n || len(es) != head+nc+nesc {
		return false
	}
	f.build(k, es[1:1+t])
	codes, escs := es[head:head+nc], es[head+nc:]
	var used int
	if k == 3 {
		used = f.decode3(exp, codes, escs)
	} else {
		used = f.decode4(exp, codes, escs)
	}
	return used == nesc
}

// patch writes the escapes of mask m (bit j: exp[j]) in order from escs
// starting at e, returning the next e, or len(escs)+1 past the end.
func patch(exp []byte, m uint, escs []byte, e int) int {
	for ; m != 0; m &= m - 1 {
		j := bits.TrailingZeros(m)
		if e >= len(escs) || j >= len(exp) {
			return len(escs) + 1
		}
		exp[j] = escs[e]
		e++
	}
	return e
}

// decode3 decodes k = 3 codes and returns the escapes used (more than
// len(escs) when the codes ask for more than there are).
func (f *fixedTables) decode3(exp, codes, escs []byte) int {
	lut, escm := f.lut3, f.esc3
	n, e, i, c := len(exp), 0, 0, 0
	if expunpack.Fast() {
		// Whole steps of 64 codes in SIMD; the loops below do the rest
		// (and find a stream that asks for more escapes than it has).
		var t [8]byte
		copy(t[:7], f.table[:7])
		i, e = expunpack.Unpack3(exp, codes, &t, escs)
		c = 3 * i / 8
	}
	// 16 codes (6 bytes) per step, read as one 8-byte word.
	for ; i+16 <= n && c+8 <= len(codes); i, c = i+16, c+6 {
		w := binary.LittleEndian.Uint64(codes[c:])
		a, b, d, g := w&0xfff, w>>12&0xfff, w>>24&0xfff, w>>36&0xfff
		out := exp[i : i+16]
		binary.LittleEndian.PutUint32(out[0:], lut[a])
		binary.LittleEndian.PutUint32(out[4:], lut[b])
		binary.LittleEndian.PutUint32(out[8:], lut[d])
		binary.LittleEndian.PutUint32(out[12:], lut[g])
		if m := uint(escm[a]) | uint(escm[b])<<4 | uint(escm[d])<<8 | uint(escm[g])<<12; m != 0 {
			if e = patch(out, m, escs, e); e > len(escs) {
				return e
			}
		}
	}
	// The rest, 4 codes at a time, the last group's padding dropped.
	for ; i < n; i += 4 {
		bit := 24*(i/8) + 3*(i%8) // a multiple of 12: i is a multiple of 4
		x := uint(codes[bit/8])
		if bit/8+1 < len(codes) {
			x |= uint(codes[bit/8+1]) << 8
		}
		x = x >> (bit % 8) & 0xfff
		var tmp [4]byte
		binary.LittleEndian.PutUint32(tmp[:], lut[x])
		out := exp[i:min(i+4, n)]
		copy(out, tmp[:])
		if m := uint(escm[x]) & (1<<len(out) - 1); m != 0 {
			if e = patch(out, m, escs, e); e > len(escs) {
				return e
			}
		}
	}
	return e
}

// decode4 decodes k = 4 codes, like decode3.
func (f *fixedTables) decode4(exp, codes, escs []byte) int {
	lut, escm := f.lut4, f.esc4
	n, e, i := len(exp), 0, 0
	for ; i+16 <= n; i += 16 {
		src := codes[i/2 : i/2+8]
		out := exp[i : i+16]
		var m uint
		for j := range 8 {
			binary.LittleEndian.PutUint16(out[2*j:], lut[src[j]])
			m |= uint(escm[src[j]]) << (2 * j)
		}
		if m != 0 {
			if e = patch(out, m, escs, e); e > len(escs) {
				return e
			}
		}
	}
	for ; i < n; i += 2 {
		x := codes[i/2]
		out := exp[i:min(i+2, n)]
		var tmp [2]byte
		binary.LittleEndian.PutUint16(tmp[:], lut[x])
		copy(out, tmp[:])
		if m := uint(escm[x]) & (1<<len(out) - 1); m != 0 {
			if e = patch(out, m, escs, e); e > len(escs) {
				return e
			}
		}
	}
	return e
}
