package quant

import (
	"fmt"

	"github.com/k3go/k3/tensor"
)

// Linear is a weight matrix in one of the stored forms: dense F32/BF16 or
// packed MXFP4 (the routed experts of the released model). It is a view;
// it never owns its bytes. It lives here, the lowest package that knows
// both forms, so that the packages binding matrices (expert, model) share
// it without depending on each other.
type Linear struct {
	// Dense is the matrix when it is F32 or BF16.
	Dense tensor.Mat
	// MX is the matrix when it is MXFP4 (IsMX).
	MX   Matrix
	IsMX bool
}

// Rows returns the output width.
func (m *Linear) Rows() int {
	if m.IsMX {
		return m.MX.Rows
	}
	return m.Dense.Rows
}

// Cols returns the input width.
func (m *Linear) Cols() int {
	if m.IsMX {
		return m.MX.Cols
	}
	return m.Dense.Cols
}

// MatMul computes dst[t][r] = Σ_c W[r][c]·x[t][c] for n tokens.
//
// F32 matrices accumulate in float64 (tensor.MatVecF64Acc: the products
// are exact, one fixed order on every kernel implementation), as the
// reference does: they occur only in test checkpoints and fixtures, whose
// tolerances f32 accumulation can exceed on outputs that cancel, and they
// never occur in the released model, whose BF16 and MXFP4 matrices use the
// f32 FMA kernels.
func (m *Linear) MatMul(run tensor.Runner, dst []float32, x []float32, n int) {
	switch {
	case m.IsMX:
		MatMul(run, dst, m.MX, x, n)
	case m.Dense.DType == tensor.F32:
		r, c := m.Dense.Rows, m.Dense.Cols
		for t := 0; t < n; t++ {
			tensor.MatVecF64Acc(run, dst[t*r:(t+1)*r], m.Dense, x[t*c:(t+1)*c])
		}
	default:
		tensor.MatMul(run, dst, m.Dense, x, n)
	}
}

// RowsView returns rows [r0, r1) of a dense matrix as its own matrix.
func (m *Linear) RowsView(r0, r1 int) tensor.Mat {
	d := m.Dense
	rb := d.RowBytes()
	return tensor.Mat{DType: d.DType, Rows: r1 - r0, Cols: d.Cols, Data: d.Data[r0*rb : r1*rb]}
}

// String names the form and shape, e.g. "MXFP4[64,32]".
func (m *Linear) String() string {
	if m.IsMX {
		return fmt.Sprintf("MXFP4[%d,%d]", m.MX.Rows, m.MX.Cols)
	}
	return fmt.Sprintf("%s[%d,%d]", m.Dense.DType, m.Dense.Rows, m.Dense.Cols)
}
