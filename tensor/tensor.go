package tensor

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// ErrShape reports a tensor whose shape, type or byte count is not what the
// caller requires.
var ErrShape = errors.New("tensor: bad shape")

// Tensor is a typed view over the raw little-endian bytes of one stored
// tensor. It never owns or copies its data.
type Tensor struct {
	DType DType
	Shape []int
	Data  []byte
}

// NumElements returns the product of the shape (1 for rank 0).
func (t Tensor) NumElements() int { return NumElements(t.Shape) }

// NumElements returns the product of a shape's dimensions (1 for rank 0). It
// returns -1 if a dimension is negative or the product overflows int64.
func NumElements(shape []int) int {
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return -1
		}
		if d != 0 && n > math.MaxInt64/int64(d) {
			return -1
		}
		n *= int64(d)
	}
	if n > math.MaxInt {
		return -1
	}
	return int(n)
}

// Check verifies that the view's byte count equals shape × element size.
func (t Tensor) Check() error {
	n := t.NumElements()
	if n < 0 {
		return fmt.Errorf("%w: shape %v", ErrShape, t.Shape)
	}
	if want := n * t.DType.Size(); want != len(t.Data) {
		return fmt.Errorf("%w: %v %s needs %d bytes, have %d", ErrShape, t.Shape, t.DType, want, len(t.Data))
	}
	return nil
}

// Mat is a row-major [Rows][Cols] matrix view in F32 or BF16, the layout of
// an nn.Linear weight: y[r] = Σ_c W[r][c]·x[c].
type Mat struct {
	DType      DType
	Rows, Cols int
	Data       []byte
}

// AsMat views a rank-2 tensor as a matrix. Only F32 and BF16 are accepted.
func (t Tensor) AsMat() (Mat, error) {
	if len(t.Shape) != 2 {
		return Mat{}, fmt.Errorf("%w: want rank 2, have %v", ErrShape, t.Shape)
	}
	if t.DType != F32 && t.DType != BF16 {
		return Mat{}, fmt.Errorf("%w: matrix dtype %s (want F32 or BF16)", ErrShape, t.DType)
	}
	if err := t.Check(); err != nil {
		return Mat{}, err
	}
	return Mat{DType: t.DType, Rows: t.Shape[0], Cols: t.Shape[1], Data: t.Data}, nil
}

// Check verifies the matrix's byte count.
func (m Mat) Check() error {
	if m.DType != F32 && m.DType != BF16 {
		return fmt.Errorf("%w: matrix dtype %s", ErrShape, m.DType)
	}
	if m.Rows < 0 || m.Cols < 0 || len(m.Data) != m.Rows*m.Cols*m.DType.Size() {
		return fmt.Errorf("%w: %dx%d %s with %d bytes", ErrShape, m.Rows, m.Cols, m.DType, len(m.Data))
	}
	return nil
}

// RowBytes returns the bytes of one row.
func (m Mat) RowBytes() int { return m.Cols * m.DType.Size() }

// Row returns row r widened into dst (len Cols).
func (m Mat) Row(dst []float32, r int) {
	b := m.Data[r*m.RowBytes() : (r+1)*m.RowBytes()]
	_ = Widen(dst[:m.Cols], b, m.DType)
}

// Widen converts len(dst) elements of src, stored as dt, to f32. It accepts
// F32, BF16 and F16 and checks that src holds exactly len(dst) elements.
func Widen(dst []float32, src []byte, dt DType) error {
	if dt.Size() == 0 || dt == U8 || dt == E8M0 {
		return fmt.Errorf("%w: cannot widen %s to f32", ErrShape, dt)
	}
	if len(src) != len(dst)*dt.Size() {
		return fmt.Errorf("%w: %d %s elements need %d bytes, have %d", ErrShape, len(dst), dt, len(dst)*dt.Size(), len(src))
	}
	switch dt {
	case F32:
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
		}
	case BF16:
		for i := range dst {
			dst[i] = BF16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	case F16:
		for i := range dst {
			dst[i] = F16ToF32(binary.LittleEndian.Uint16(src[2*i:]))
		}
	}
	return nil
}

// WidenTensor returns a new f32 slice holding t's elements. Use it for small
// vectors (norm gains, biases), never for matrices.
func WidenTensor(t Tensor) ([]float32, error) {
	if err := t.Check(); err != nil {
		return nil, err
	}
	dst := make([]float32, t.NumElements())
	if err := Widen(dst, t.Data, t.DType); err != nil {
		return nil, err
	}
	return dst, nil
}
