// Package quant holds the MXFP4 format of Kimi K3's routed experts and the
// kernels that multiply packed MXFP4 matrices by f32 activations without ever
// dequantising a matrix to memory.
//
// MXFP4 (OCP Microscaling, FP4 E2M1 elements with an E8M0 scale per 32): a
// row of Cols elements is stored as Cols/2 packed bytes, where byte j holds
// element 2j in its low nibble and element 2j+1 in its high nibble, and
// Cols/32 scale bytes s with value 2^(s-127). A scale byte of 255 (NaN in
// the OCP specification) makes its group of 32 contribute nothing, as in the
// reference engine.
package quant

import (
	"errors"
	"fmt"
	"math"

	"github.com/k3go/k3/tensor"
)

// GroupSize is the number of elements that share one E8M0 scale.
const GroupSize = 32

// SkipScale is the E8M0 scale byte that zeroes its group.
const SkipScale = 255

// E2M1 maps a 4-bit code to its value: bit 3 sign, bits 2..1 exponent,
// bit 0 mantissa.
// Code 8 is negative zero (a Go constant -0.0 would be +0).
var E2M1 = [16]float32{0, 0.5, 1, 1.5, 2, 3, 4, 6, negZero, -0.5, -1, -1.5, -2, -3, -4, -6}

var negZero = math.Float32frombits(0x80000000)

// ErrFormat reports MXFP4 bytes whose sizes do not describe a valid matrix.
var ErrFormat = errors.New("quant: bad MXFP4 matrix")

// Matrix is a row-major [Rows][Cols] MXFP4 matrix view: Rows*Cols/2 packed
// bytes and Rows*Cols/32 scale bytes. It never owns or copies its data.
type Matrix struct {
	Rows, Cols int
	Packed     []byte
	Scales     []byte
}

// Check verifies that Cols is a multiple of the group size and that the byte
// counts match the shape.
func (m Matrix) Check() error {
	if m.Rows < 0 || m.Cols < 0 || m.Cols%GroupSize != 0 {
		return fmt.Errorf("%w: %dx%d (columns must be a multiple of %d)", ErrFormat, m.Rows, m.Cols, GroupSize)
	}
	if len(m.Packed) != m.Rows*m.Cols/2 {
		return fmt.Errorf("%w: %dx%d needs %d packed bytes, have %d", ErrFormat, m.Rows, m.Cols, m.Rows*m.Cols/2, len(m.Packed))
	}
	if len(m.Scales) != m.Rows*m.Cols/GroupSize {
		return fmt.Errorf("%w: %dx%d needs %d scale bytes, have %d", ErrFormat, m.Rows, m.Cols, m.Rows*m.Cols/GroupSize, len(m.Scales))
	}
	return nil
}

// FromTensors builds a Matrix from the two stored tensors of one MXFP4
// weight: weight_packed U8 [rows, cols/2] and weight_scale U8 [rows, cols/32].
func FromTensors(packed, scale tensor.Tensor) (Matrix, error) {
	if packed.DType != tensor.U8 || len(packed.Shape) != 2 {
		return Matrix{}, fmt.Errorf("%w: packed tensor must be U8 rank 2, have %s %v", ErrFormat, packed.DType, packed.Shape)
	}
	if (scale.DType != tensor.U8 && scale.DType != tensor.E8M0) || len(scale.Shape) != 2 {
		return Matrix{}, fmt.Errorf("%w: scale tensor must be U8 rank 2, have %s %v", ErrFormat, scale.DType, scale.Shape)
	}
	if packed.Shape[0] != scale.Shape[0] {
		return Matrix{}, fmt.Errorf("%w: packed has %d rows, scale %d", ErrFormat, packed.Shape[0], scale.Shape[0])
	}
	if scale.Shape[1]*GroupSize != packed.Shape[1]*2 {
		return Matrix{}, fmt.Errorf("%w: scale columns %d × %d != packed columns %d × 2 (group size must be %d)",
			ErrFormat, scale.Shape[1], GroupSize, packed.Shape[1], GroupSize)
	}
	if err := packed.Check(); err != nil {
		return Matrix{}, err
	}
	if err := scale.Check(); err != nil {
		return Matrix{}, err
	}
	m := Matrix{Rows: packed.Shape[0], Cols: packed.Shape[1] * 2, Packed: packed.Data, Scales: scale.Data}
	return m, m.Check()
}

// Bytes returns the storage size of a rows×cols MXFP4 matrix.
func Bytes(rows, cols int) int { return rows*cols/2 + rows*cols/GroupSize }

// DequantizeRow writes the exact f32 values of row r into dst (len Cols).
// It is for tests and inspection; the kernels never materialise rows.
func (m Matrix) DequantizeRow(dst []float32, r int) {
	pr := m.Packed[r*m.Cols/2 : (r+1)*m.Cols/2]
	sr := m.Scales[r*m.Cols/GroupSize : (r+1)*m.Cols/GroupSize]
	for c := 0; c < m.Cols; c += 2 {
		s := sr[c/GroupSize]
		b := pr[c/2]
		if s == SkipScale {
			dst[c], dst[c+1] = 0, 0
			continue
		}
		sc := tensor.E8M0ToF32(s)
		dst[c] = E2M1[b&0xF] * sc
		dst[c+1] = E2M1[b>>4] * sc
	}
}
