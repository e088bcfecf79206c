package tensor

import (
	"fmt"
	"sync"
)

// MatVec computes dst[r] = Σ_c W[r][c]·x[c] for every row of w, splitting
// rows over r (nil runs serially). len(dst) must be w.Rows and len(x)
// w.Cols; a mismatch is a programming error and panics.
//
// The reduction order inside a row depends only on w.Cols and the selected
// kernel implementation, so the result is bit-identical for every Runner,
// thread count and split.
func MatVec(r Runner, dst []float32, w Mat, x []float32) {
	MatMul(r, dst, w, x, 1)
}

// MatMul computes n products at once, one weight pass for all of them:
// dst[t*w.Rows+r] = Σ_c W[r][c]·x[t*w.Cols+c] for t < n. Each token gets
// exactly the arithmetic MatVec would give it, bit for bit.
func MatMul(r Runner, dst []float32, w Mat, x []float32, n int) {
	if n <= 0 || w.Rows == 0 {
		return
	}
	if w.DType != F32 && w.DType != BF16 {
		panic(fmt.Sprintf("tensor.MatMul: unsupported weight dtype %s", w.DType))
	}
	if len(w.Data) != w.Rows*w.Cols*w.DType.Size() || len(dst) < n*w.Rows || len(x) < n*w.Cols {
		panic(fmt.Sprintf("tensor.MatMul: shape mismatch: %dx%d %s (%d bytes), n=%d, len(dst)=%d, len(x)=%d",
			w.Rows, w.Cols, w.DType, len(w.Data), n, len(dst), len(x)))
	}
	impl := active()
	j := matJobs.Get().(*matJob)
	*j = matJob{dst: dst, w: w, x: x, n: n, impl: impl}
	if a := impl.accel; a != nil {
		var buf *[]float32
		j.px, buf = a.packX(x, w.Cols, n)
		run(r, w.Rows, a.grain(w.RowBytes(), n), j)
		if buf != nil {
			a.releaseX(buf)
		}
	} else {
		run(r, w.Rows, RowGrain(w.RowBytes(), n), j)
	}
	*j = matJob{}
	matJobs.Put(j)
}

var matJobs = sync.Pool{New: func() any { return new(matJob) }}

type matJob struct {
	dst  []float32
	w    Mat
	x    []float32
	px   []float32 // x packed by the implementation, if it needs that
	n    int
	impl *Impl
}

func (j *matJob) Range(lo, hi int) {
	rb := j.w.RowBytes()
	wb := j.w.Data[lo*rb : hi*rb]
	if a := j.impl.accel; a != nil {
		a.mat(j.dst[lo:], j.w.Rows, wb, j.w.DType == BF16, hi-lo, j.w.Cols, j.x, j.px, j.n)
		return
	}
	switch j.w.DType {
	case BF16:
		j.impl.MatBF16(j.dst[lo:], j.w.Rows, wb, hi-lo, j.w.Cols, j.x, j.n)
	case F32:
		j.impl.MatF32(j.dst[lo:], j.w.Rows, wb, hi-lo, j.w.Cols, j.x, j.n)
	}
}
