package synth

import (
	"encoding/binary"
	"hash/fnv"
	"math"
	"sync"

	"github.com/k3go/k3/tensor"
)

// The generator is counter-based: the 8 bytes at tensor offset 8w are a
// function of (seed, tensor name, w) alone, so any range of any tensor can
// be produced by any goroutine, in any order, and the files do not depend
// on the chunk size or the number of workers.

const golden = 0x9E3779B97F4A7C15

// mix is the SplitMix64 finaliser.
func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// tensorKey derives a tensor's stream key from the seed and its name.
func tensorKey(seed uint64, name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return mix(mix(seed+golden) ^ h.Sum64())
}

// word returns the w-th random word of the stream key.
func word(key, w uint64) uint64 { return mix(key + (w+1)*golden) }

// unitFloat maps a random word to [0, 1) with 53 bits.
func unitFloat(r uint64) float64 { return float64(r>>11) * (1.0 / (1 << 53)) }

// generator produces a tensor's bytes. fillWords writes the len(dst)/8
// words starting at word index w0 (tensor bytes [8·w0, 8·w0+len(dst)));
// len(dst) is a multiple of 8.
type generator interface {
	fillWords(dst []byte, w0 uint64)
}

// fillTensor writes tensor bytes [off, off+len(dst)) into dst.
func fillTensor(g generator, off int64, dst []byte) {
	w := uint64(off / 8)
	if lead := int(off % 8); lead != 0 {
		var tmp [8]byte
		g.fillWords(tmp[:], w)
		n := copy(dst, tmp[lead:])
		dst = dst[n:]
		w++
	}
	if full := len(dst) &^ 7; full > 0 {
		g.fillWords(dst[:full], w)
		dst = dst[full:]
		w += uint64(full / 8)
	}
	if len(dst) > 0 {
		var tmp [8]byte
		g.fillWords(tmp[:], w)
		copy(dst, tmp[:])
	}
}

// normalBF16 draws BF16 elements from N(0, std²) by looking 16 random bits
// up in a table of the distribution's 65,536 quantiles: four elements per
// random word, no floating point per element.
type normalBF16 struct {
	key uint64
	tab *[1 << 16]uint16
}

func (g normalBF16) fillWords(dst []byte, w0 uint64) {
	tab, key := g.tab, g.key
	for i := 0; i+8 <= len(dst); i += 8 {
		r := word(key, w0)
		w0++
		v := uint64(tab[r&0xffff]) | uint64(tab[r>>16&0xffff])<<16 | uint64(tab[r>>32&0xffff])<<32 | uint64(tab[r>>48])<<48
		binary.LittleEndian.PutUint64(dst[i:], v)
	}
}

var (
	tablesMu sync.Mutex
	tables   = map[float64]*[1 << 16]uint16{}
)

// normalTable returns the BF16 quantile table of N(0, std²).
func normalTable(std float64) *[1 << 16]uint16 {
	tablesMu.Lock()
	defer tablesMu.Unlock()
	if t, ok := tables[std]; ok {
		return t
	}
	t := new([1 << 16]uint16)
	for i := range t {
		p := (float64(i) + 0.5) / (1 << 16)
		t[i] = tensor.F32ToBF16(float32(std * math.Sqrt2 * math.Erfinv(2*p-1)))
	}
	tables[std] = t
	return t
}

// randomBytes is uniform random bytes: MXFP4 packed elements with every
// E2M1 code equally likely.
type randomBytes struct{ key uint64 }

func (g randomBytes) fillWords(dst []byte, w0 uint64) {
	for i := 0; i+8 <= len(dst); i += 8 {
		binary.LittleEndian.PutUint64(dst[i:], word(g.key, w0))
		w0++
	}
}

// e2m1Moment is the mean square of the E2M1 values when all 16 codes are
// equally likely: (0 + 0.25 + 1 + 2.25 + 4 + 9 + 16 + 36)/8.
const e2m1Moment = 8.5625

// scaleBytes draws E8M0 scale bytes: each group gets 2^lo or 2^(lo+1), the
// larger with probability thr/256, chosen so that the dequantised weights
// have the target variance on average.
type scaleBytes struct {
	key uint64
	lo  byte
	thr uint64 // 0..256
}

func newScaleBytes(key uint64, variance float64) scaleBytes {
	s2 := variance / e2m1Moment // target mean of scale²
	e := math.Floor(math.Log2(s2) / 2)
	lo, hi := math.Pow(4, e), math.Pow(4, e+1)
	p := (s2 - lo) / (hi - lo)
	b := int(e) + 127
	b = max(1, min(b, 253))
	return scaleBytes{key: key, lo: byte(b), thr: uint64(math.Round(p * 256))}
}

func (g scaleBytes) fillWords(dst []byte, w0 uint64) {
	for i := 0; i+8 <= len(dst); i += 8 {
		r := word(g.key, w0)
		w0++
		// Byte k is lo, plus one when random byte k is below thr
		// (branch-free: the subtraction borrows into bit 63).
		v := uint64(g.lo) * 0x0101010101010101
		for k := 0; k < 64; k += 8 {
			v += ((r>>k&0xff - g.thr) >> 63) << k
		}
		binary.LittleEndian.PutUint64(dst[i:], v)
	}
}

// vecKind says how a vector's elements are drawn.
type vecKind uint8

const (
	vecUniform vecKind = iota // uniform in [lo, hi)
	vecConst                  // lo
)

// vector draws F32 or BF16 elements one at a time (vectors are small).
// Elements at index n and beyond are zero (A_log padded to head_dim).
type vector struct {
	key    uint64
	dtype  tensor.DType // F32 or BF16
	kind   vecKind
	lo, hi float64
	n      uint64
}

func (g vector) value(i uint64) float32 {
	if i >= g.n {
		return 0
	}
	switch g.kind {
	case vecUniform:
		// The explicit conversion keeps the compiler from fusing the
		// multiply and add (it does on arm64), so every build gives the
		// same bits.
		return float32(g.lo + float64((g.hi-g.lo)*unitFloat(word(g.key, i))))
	}
	return float32(g.lo)
}

func (g vector) fillWords(dst []byte, w0 uint64) {
	for i := 0; i+8 <= len(dst); i += 8 {
		if g.dtype == tensor.F32 {
			e := 2 * w0
			binary.LittleEndian.PutUint32(dst[i:], math.Float32bits(g.value(e)))
			binary.LittleEndian.PutUint32(dst[i+4:], math.Float32bits(g.value(e+1)))
		} else {
			e := 4 * w0
			for k := range uint64(4) {
				binary.LittleEndian.PutUint16(dst[i+2*int(k):], tensor.F32ToBF16(g.value(e+k)))
			}
		}
		w0++
	}
}
