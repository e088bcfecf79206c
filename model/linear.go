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
func (l *Linear) MatMul(run tensor.Runner, dst []float32, x []float32, n int) {
	if l.IsMX {
		quant.MatMul(run, dst, l.MX, x, n)
		return
	}
	tensor.MatMul(run, dst, l.Dense, x, n)
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
