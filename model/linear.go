package model

import (
	"fmt"

	"github.com/k3go/k3/quant"
	"github.com/k3go/k3/tensor"
)

// Linear is a weight matrix in one of the stored forms: dense F32/BF16 or
// packed MXFP4. It is a view; it never owns its bytes.
type Linear struct {
	Dense tensor.Mat
	MX    quant.Matrix
	IsMX  bool
}

// Rows returns the output width.
func (l *Linear) Rows() int {
	if l.IsMX {
		return l.MX.Rows
	}
	return l.Dense.Rows
}

// Cols returns the input width.
func (l *Linear) Cols() int {
	if l.IsMX {
		return l.MX.Cols
	}
	return l.Dense.Cols
}

// MatMul computes dst[t][r] = Σ_c W[r][c]·x[t][c] for n tokens.
//
// F32 matrices accumulate in float64 (tensor.MatVecF64Acc: the products
// are exact, one fixed order on every kernel implementation), as the
// reference does: they occur only in test checkpoints and fixtures, whose
// tolerances f32 accumulation can exceed on outputs that cancel, and they
// never occur in the released model, whose BF16 and MXFP4 matrices use the
// f32 FMA kernels.
func (l *Linear) MatMul(run tensor.Runner, dst []float32, x []float32, n int) {
	switch {
	case l.IsMX:
		quant.MatMul(run, dst, l.MX, x, n)
	case l.Dense.DType == tensor.F32:
		r, c := l.Dense.Rows, l.Dense.Cols
		for t := 0; t < n; t++ {
			tensor.MatVecF64Acc(run, dst[t*r:(t+1)*r], l.Dense, x[t*c:(t+1)*c])
		}
	default:
		tensor.MatMul(run, dst, l.Dense, x, n)
	}
}

// rowsView returns rows [r0, r1) of a dense matrix as its own matrix.
func (l *Linear) rowsView(r0, r1 int) tensor.Mat {
	m := l.Dense
	rb := m.RowBytes()
	return tensor.Mat{DType: m.DType, Rows: r1 - r0, Cols: m.Cols, Data: m.Data[r0*rb : r1*rb]}
}

func (l *Linear) String() string {
	if l.IsMX {
		return fmt.Sprintf("MXFP4[%d,%d]", l.MX.Rows, l.MX.Cols)
	}
	return fmt.Sprintf("%s[%d,%d]", l.Dense.DType, l.Dense.Rows, l.Dense.Cols)
}
