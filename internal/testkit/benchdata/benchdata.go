// Package benchdata draws the inputs of kernel benchmarks from the
// distributions the engine sees: trunk weights like a trained model's
// (normal, σ 0.02, in BF16 or F32), MXFP4 nibbles and E8M0 scales with the
// frequencies of the released checkpoint, and activations of the scale an
// RMS-normalised hidden state has.
//
// It exists because the data changes the timing, not only the result: an
// Intel core takes a microcode assist on every FMA with a subnormal input,
// and weights made of arbitrary bytes are full of them (a BF16 mat-vec
// filled with byte&0x3f ran at a quarter of the speed it runs at with real
// weights). Nothing here ever yields a subnormal, a zero scale or a NaN;
// [HasSubnormalBF16], [HasSubnormalF32] and [HasSubnormalMXFP4] let tests
// prove that of the data a benchmark actually uses.
package benchdata

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
)

// WeightSigma is the standard deviation of the trunk weights drawn here,
// that of a trained transformer's projections.
const WeightSigma = 0.02

// weight draws one trunk weight: normal with σ WeightSigma, never zero or
// subnormal (a draw that rounds to zero is redrawn).
func weight(rng *rand.Rand) float32 {
	for {
		v := float32(rng.NormFloat64() * WeightSigma)
		if math.Abs(float64(v)) >= 1e-30 {
			return v
		}
	}
}

// BF16Weights returns n trunk weights as little-endian BF16 bytes.
func BF16Weights(rng *rand.Rand, n int) []byte {
	b := make([]byte, 2*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint16(b[2*i:], bf16(weight(rng)))
	}
	return b
}

// F32Weights returns n trunk weights as little-endian F32 bytes.
func F32Weights(rng *rand.Rand, n int) []byte {
	b := make([]byte, 4*n)
	for i := 0; i < n; i++ {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(weight(rng)))
	}
	return b
}

// Activations returns n activations: normal with σ 1, the scale of a
// hidden state after RMSNorm, never subnormal.
func Activations(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		for {
			x[i] = float32(rng.NormFloat64())
			if math.Abs(float64(x[i])) >= 1e-30 {
				break
			}
		}
	}
	return x
}

// nibbleFreq is how often each E2M1 code (0-15) occurs in the released
// checkpoint's expert weights, in parts per 10,000: counted over the rows
// of layer 1, expert 0, w1 that /work/shared/fixtures/mxfp4.json holds.
// Signs are even; small magnitudes dominate, ±6 is rare.
var nibbleFreq = [16]int{579, 1089, 957, 764, 762, 531, 252, 52, 580, 1123, 960, 763, 769, 516, 254, 51}

// scaleFreq is the same for the E8M0 group scales: 2^-7 for 84% of the
// groups, 2^-8 and 2^-6 for the rest.
var scaleFreq = []struct {
	scale  byte
	per10k int
}{{120, 1432}, {121, 8521}, {122, 47}}

// pick draws an index with the given weights.
func pick(rng *rand.Rand, w []int) int {
	total := 0
	for _, v := range w {
		total += v
	}
	x := rng.IntN(total)
	for i, v := range w {
		if x < v {
			return i
		}
		x -= v
	}
	return len(w) - 1
}

// MXFP4 returns the packed nibbles (two a byte, the even element in the
// low nibble) and the scales (one per 32 elements) of a rows×cols MXFP4
// matrix drawn like the released experts. cols must be a multiple of 32.
func MXFP4(rng *rand.Rand, rows, cols int) (packed, scales []byte) {
	packed = make([]byte, rows*cols/2)
	for i := range packed {
		packed[i] = byte(pick(rng, nibbleFreq[:])) | byte(pick(rng, nibbleFreq[:]))<<4
	}
	sw := make([]int, len(scaleFreq))
	for i, s := range scaleFreq {
		sw[i] = s.per10k
	}
	scales = make([]byte, rows*cols/32)
	for i := range scales {
		scales[i] = scaleFreq[pick(rng, sw)].scale
	}
	return packed, scales
}

// bf16 rounds f to BF16 (nearest, ties to even); f is finite.
func bf16(f float32) uint16 {
	u := math.Float32bits(f)
	return uint16((u + 0x7fff + (u >> 16 & 1)) >> 16)
}

// HasSubnormalBF16 reports whether little-endian BF16 bytes hold a
// subnormal value (exponent bits zero, mantissa not).
func HasSubnormalBF16(b []byte) bool {
	for i := 0; i+1 < len(b); i += 2 {
		v := binary.LittleEndian.Uint16(b[i:])
		if v&0x7f80 == 0 && v&0x007f != 0 {
			return true
		}
	}
	return false
}

// HasSubnormalF32 reports whether x holds a subnormal value.
func HasSubnormalF32(x []float32) bool {
	for _, v := range x {
		if subnormal32(math.Float32bits(v)) {
			return true
		}
	}
	return false
}

// HasSubnormalF32Bytes is [HasSubnormalF32] over little-endian F32 bytes.
func HasSubnormalF32Bytes(b []byte) bool {
	for i := 0; i+3 < len(b); i += 4 {
		if subnormal32(binary.LittleEndian.Uint32(b[i:])) {
			return true
		}
	}
	return false
}

// subnormal32 reports whether F32 bits u are subnormal: exponent bits zero,
// mantissa not.
func subnormal32(u uint32) bool { return u&0x7f800000 == 0 && u&0x007fffff != 0 }

// HasSubnormalMXFP4 reports whether an MXFP4 matrix dequantises to a
// subnormal F32: the smallest non-zero magnitude is 0.5 × 2^(scale-127),
// so any scale below 2 (or the reserved 255) counts.
func HasSubnormalMXFP4(scales []byte) bool {
	for _, s := range scales {
		if s < 2 || s == 0xff {
			return true
		}
	}
	return false
}
