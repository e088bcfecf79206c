// Package tensor holds the element types of k3 checkpoints, typed views over
// raw little-endian tensor bytes, widening conversions, and the dense f32
// kernels (matrix-vector and matrix-matrix products over BF16 and F32
// weights) that the engine runs on the trunk.
//
// Weights stay in their stored type: a [Mat] is a view over the bytes read
// from disk, widened to f32 inside the kernels, never converted as a whole.
// The package is importable on its own and depends on no other k3 package
// except internal ones.
package tensor

import (
	"fmt"
	"math"
)

// DType is the element type of a stored tensor.
type DType uint8

// The element types k3 reads. E8M0 is the MXFP4 scale byte (an exponent with
// bias 127); it is stored as U8 in safetensors files and named separately only
// where a view needs to say what its bytes mean.
const (
	Invalid DType = iota
	F32
	BF16
	F16
	U8
	E8M0
)

// Size returns the number of bytes of one element.
func (d DType) Size() int {
	switch d {
	case F32:
		return 4
	case BF16, F16:
		return 2
	case U8, E8M0:
		return 1
	}
	return 0
}

// String returns the safetensors name of the type ("F32", "BF16", ...).
func (d DType) String() string {
	switch d {
	case F32:
		return "F32"
	case BF16:
		return "BF16"
	case F16:
		return "F16"
	case U8:
		return "U8"
	case E8M0:
		return "E8M0"
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// ParseDType maps a safetensors dtype string to a DType. Types k3 cannot
// read (I64, F8_E4M3, ...) return an error that names them.
func ParseDType(s string) (DType, error) {
	switch s {
	case "F32":
		return F32, nil
	case "BF16":
		return BF16, nil
	case "F16":
		return F16, nil
	case "U8":
		return U8, nil
	case "E8M0", "F8_E8M0":
		return E8M0, nil
	}
	return Invalid, fmt.Errorf("tensor: unsupported dtype %q", s)
}

// BF16ToF32 widens a bfloat16 bit pattern. It is exact: the 16 bits become
// the top half of the f32 word.
func BF16ToF32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// F32ToBF16 rounds an f32 to the nearest bfloat16, ties to even. NaNs stay
// NaN (quiet), infinities stay infinite.
func F32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 { // NaN: keep sign, force a quiet mantissa bit
		return uint16(u>>16) | 0x40
	}
	rounding := uint32(0x7fff) + (u>>16)&1
	return uint16((u + rounding) >> 16)
}

// F16ToF32 widens an IEEE half-precision bit pattern exactly, including
// subnormals, infinities and NaN payloads.
func F16ToF32(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f: // inf or NaN
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp != 0: // normal
		return math.Float32frombits(sign | (exp+112)<<23 | man<<13)
	case man == 0: // signed zero
		return math.Float32frombits(sign)
	}
	// Subnormal half: value = man * 2^-24; normalise into an f32.
	e := uint32(113)
	for man&0x400 == 0 {
		man <<= 1
		e--
	}
	return math.Float32frombits(sign | e<<23 | (man&0x3ff)<<13)
}

// E8M0ToF32 returns 2^(s-127), the value of an E8M0 scale byte. s = 0 gives
// the f32 subnormal 2^-127. s = 255 is NaN in the OCP specification; k3
// treats such a group as zero, which callers handle before scaling, so this
// function returns NaN for it.
func E8M0ToF32(s uint8) float32 {
	switch s {
	case 255:
		return float32(math.NaN())
	case 0:
		return math.Float32frombits(0x00400000)
	}
	return math.Float32frombits(uint32(s) << 23)
}
