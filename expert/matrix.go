// Package expert locates, reads and binds the routed experts of a Kimi K3
// checkpoint. Each expert is three matrices (w1 gate, w2 down, w3 up),
// stored as MXFP4 (a packed U8 tensor and an E8M0 scale tensor each: six
// tensors) in the released checkpoint or as dense F32/BF16 in test
// checkpoints. In the released layout an expert's six tensors form one
// contiguous run, so an expert is read with one request; an Index checks
// that for every expert and falls back to several requests where a
// checkpoint is laid out otherwise. Experts are bound in place, packed: a
// Matrix is a view over the bytes read, never a dequantised copy.
package expert

import (
	"fmt"

	"github.com/k3go/k3/quant"
	"github.com/k3go/k3/tensor"
)

// Matrix is a weight matrix in one of the stored forms: dense F32/BF16 or
// packed MXFP4. It is a view; it never owns its bytes.
type Matrix struct {
	Dense tensor.Mat
	MX    quant.Matrix
	IsMX  bool
}

// Rows returns the output width.
func (m *Matrix) Rows() int {
	if m.IsMX {
		return m.MX.Rows
	}
	return m.Dense.Rows
}

// Cols returns the input width.
func (m *Matrix) Cols() int {
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
func (m *Matrix) MatMul(run tensor.Runner, dst []float32, x []float32, n int) {
	switch {
	case m.IsMX:
		quant.MatMul(run, dst, m.MX, x, n)
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
func (m *Matrix) RowsView(r0, r1 int) tensor.Mat {
	d := m.Dense
	rb := d.RowBytes()
	return tensor.Mat{DType: d.DType, Rows: r1 - r0, Cols: d.Cols, Data: d.Data[r0*rb : r1*rb]}
}

func (m *Matrix) String() string {
	if m.IsMX {
		return fmt.Sprintf("MXFP4[%d,%d]", m.MX.Rows, m.MX.Cols)
	}
	return fmt.Sprintf("%s[%d,%d]", m.Dense.DType, m.Dense.Rows, m.Dense.Cols)
}
