package quant

import (
	"fmt"
	"sync"

	"github.com/k3go/k3/tensor"
)

// MatVec computes dst[r] = Σ_c W[r][c]·x[c] for an MXFP4 matrix, splitting
// rows over run (nil runs serially). The matrix is decoded in registers,
// group by group; it is never dequantised to memory. Shape mismatches are
// programming errors and panic.
func MatVec(run tensor.Runner, dst []float32, m Matrix, x []float32) {
	MatMul(run, dst, m, x, 1)
}

// MatMul computes n products sharing one pass over the packed weights:
// dst[t*m.Rows+r] = Σ_c W[r][c]·x[t*m.Cols+c] for t < n. Each token gets
// exactly the arithmetic MatVec would give it, bit for bit.
func MatMul(run tensor.Runner, dst []float32, m Matrix, x []float32, n int) {
	if n <= 0 || m.Rows == 0 {
		return
	}
	if m.Cols%GroupSize != 0 || len(m.Packed) != m.Rows*m.Cols/2 || len(m.Scales) != m.Rows*m.Cols/GroupSize ||
		len(dst) < n*m.Rows || len(x) < n*m.Cols {
		panic(fmt.Sprintf("quant.MatMul: shape mismatch: %dx%d (%d packed, %d scale bytes), n=%d, len(dst)=%d, len(x)=%d",
			m.Rows, m.Cols, len(m.Packed), len(m.Scales), n, len(dst), len(x)))
	}
	impl := active()
	j := jobs.Get().(*job)
	*j = job{dst: dst, m: m, x: x, n: n, impl: impl}
	if a := impl.accel; a != nil && m.Cols > 0 {
		var buf *[]float32
		j.px, buf = a.packX(x, m.Cols, n)
		tensor.Run(run, m.Rows, a.grain(n), j)
		a.releaseX(buf)
	} else {
		tensor.Run(run, m.Rows, tensor.RowGrain(m.Cols/2+m.Cols/GroupSize, n), j)
	}
	*j = job{}
	jobs.Put(j)
}

var jobs = sync.Pool{New: func() any { return new(job) }}

type job struct {
	dst  []float32
	m    Matrix
	x    []float32
	px   []float32 // x permuted and packed by the implementation
	n    int
	impl *Impl
}

func (j *job) Range(lo, hi int) {
	pb, sb := j.m.Cols/2, j.m.Cols/GroupSize
	if a := j.impl.accel; a != nil && j.px != nil {
		a.mat(j.dst[lo:], j.m.Rows, j.m.Packed[lo*pb:hi*pb], j.m.Scales[lo*sb:hi*sb], hi-lo, j.m.Cols, j.x, j.px, j.n)
		return
	}
	j.impl.Mat(j.dst[lo:], j.m.Rows, j.m.Packed[lo*pb:hi*pb], j.m.Scales[lo*sb:hi*sb], hi-lo, j.m.Cols, j.x, j.n)
}
