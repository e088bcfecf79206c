package tensor

import (
	"fmt"
	"sync"
)

// Dot returns Σ a[i]·b[i] in f32. The order is fixed and the same for every
// kernel implementation (32 lanes, element i to lane i mod 32, each product
// rounded to f32 then added; lanes folded l_i+l_{i+16}, then +l_{i+8}, then
// the tree ((l0+l4)+(l1+l5))+((l2+l6)+(l3+l7)); the last len mod 32
// products added one by one), so the result is bit-identical on every
// implementation and machine. len(a) must equal len(b).
func Dot(a, b []float32) float32 {
	if len(a) != len(b) {
		panic(fmt.Sprintf("tensor.Dot: lengths %d and %d", len(a), len(b)))
	}
	return active().ops().dot(a, b)
}

// Axpy computes y[i] += a·x[i], the product rounded to f32 before the add
// (never fused), so the result is bit-identical on every implementation.
// len(x) must equal len(y).
func Axpy(y []float32, a float32, x []float32) {
	if len(x) != len(y) {
		panic(fmt.Sprintf("tensor.Axpy: lengths %d and %d", len(y), len(x)))
	}
	active().ops().axpy(y, a, x)
}

// MatVecF64Acc computes dst[r] = float32(Σ_c W[r][c]·x[c]) with the sum in
// float64, for the MoE router. Products of BF16 or F32 weights with f32
// activations are exact in f64, and the order is fixed and the same for
// every kernel implementation (16 f64 lanes, column c to lane c mod 16;
// lanes folded l_i+l_{i+8}, then the tree ((m0+m4)+(m1+m5))+((m2+m6)+(m3+m7));
// the last cols mod 16 products added one by one), so a BF16 gate and its
// F32 widening give bit-identical scores on every implementation and
// machine, for any Runner. Shapes are checked as in MatVec.
func MatVecF64Acc(r Runner, dst []float32, w Mat, x []float32) {
	if w.Rows == 0 {
		return
	}
	if w.DType != F32 && w.DType != BF16 {
		panic(fmt.Sprintf("tensor.MatVecF64Acc: unsupported weight dtype %s", w.DType))
	}
	if len(w.Data) != w.Rows*w.Cols*w.DType.Size() || len(dst) < w.Rows || len(x) < w.Cols {
		panic(fmt.Sprintf("tensor.MatVecF64Acc: shape mismatch: %dx%d %s (%d bytes), len(dst)=%d, len(x)=%d",
			w.Rows, w.Cols, w.DType, len(w.Data), len(dst), len(x)))
	}
	matMulF64Acc(r, dst, w, x, 1)
}

// MatMulF64Acc is MatVecF64Acc over n input rows: dst[t][r] = float32(Σ_c
// W[r][c]·x[t][c]), x and dst row-major. Each output is computed exactly as
// MatVecF64Acc computes it, so the result of a row never depends on n or on
// the other rows; the weights are read once for all n rows (each block of
// rows stays in cache while every input row passes over it).
func MatMulF64Acc(r Runner, dst []float32, w Mat, x []float32, n int) {
	if w.Rows == 0 || n <= 0 {
		return
	}
	if w.DType != F32 && w.DType != BF16 {
		panic(fmt.Sprintf("tensor.MatMulF64Acc: unsupported weight dtype %s", w.DType))
	}
	if len(w.Data) != w.Rows*w.Cols*w.DType.Size() || len(dst) < n*w.Rows || len(x) < n*w.Cols {
		panic(fmt.Sprintf("tensor.MatMulF64Acc: shape mismatch: %dx%d %s (%d bytes), n=%d, len(dst)=%d, len(x)=%d",
			w.Rows, w.Cols, w.DType, len(w.Data), n, len(dst), len(x)))
	}
	matMulF64Acc(r, dst, w, x, n)
}

func matMulF64Acc(r Runner, dst []float32, w Mat, x []float32, n int) {
	o := active().ops()
	j := f64Jobs.Get().(*f64Job)
	*j = f64Job{dst: dst, w: w, x: x[:n*w.Cols], n: n, ops: o}
	var xb *[]float64
	if o.rowsF64 != nil {
		xb = getF64(n * w.Cols)
		for i, v := range j.x {
			(*xb)[i] = float64(v)
		}
		j.x64 = *xb
	}
	run(r, w.Rows, RowGrain(w.RowBytes(), n), j)
	if xb != nil {
		f64Bufs.Put(xb)
	}
	*j = f64Job{}
	f64Jobs.Put(j)
}

// vecOps are an implementation's vector helpers. rowsF64, when set, computes
// the f64 lane sums of whole 16-column blocks of rows into dst (x64 = x
// widened); the Go code adds the tail.
type vecOps struct {
	dot     func(a, b []float32) float32
	axpy    func(y []float32, a float32, x []float32)
	rowsF64 func(dst []float64, w []byte, bf16 bool, stride, rows, blocks int, x64 []float64)
}

var genericOps = vecOps{dot: dotGeneric, axpy: axpyGeneric}

func (i *Impl) ops() *vecOps {
	if i.vec != nil {
		return i.vec
	}
	return &genericOps
}

var (
	f64Jobs = sync.Pool{New: func() any { return new(f64Job) }}
	f64Bufs sync.Pool
)

func getF64(n int) *[]float64 {
	if p, ok := f64Bufs.Get().(*[]float64); ok && cap(*p) >= n {
		*p = (*p)[:n]
		return p
	}
	b := make([]float64, n)
	return &b
}

type f64Job struct {
	dst []float32 // [n][w.Rows]
	w   Mat
	x   []float32 // [n][w.Cols]
	x64 []float64 // x widened, when ops.rowsF64 is set
	n   int
	ops *vecOps
}

// f64Block is the number of weight rows one input row passes over before
// the next input row does: small enough to stay in L2 (7168 BF16 columns:
// 448 KiB), so the weights come from memory once for every input row.
const f64Block = 32

func (j *f64Job) Range(lo, hi int) {
	for b := lo; b < hi; b += f64Block {
		e := min(b+f64Block, hi)
		for t := 0; t < j.n; t++ {
			j.rows(b, e, t)
		}
	}
}

// rows computes dst[t][lo:hi].
func (j *f64Job) rows(lo, hi, t int) {
	rb := j.w.RowBytes()
	bf16 := j.w.DType == BF16
	cols := j.w.Cols
	blocks := cols / 16
	x := j.x[t*cols : (t+1)*cols]
	dst := j.dst[t*j.w.Rows : (t+1)*j.w.Rows]
	if j.ops.rowsF64 == nil || blocks == 0 {
		for r := lo; r < hi; r++ {
			dst[r] = float32(dotF64Generic(j.w.Data[r*rb:(r+1)*rb], bf16, x))
		}
		return
	}
	sb := getF64(hi - lo)
	sums := *sb
	j.ops.rowsF64(sums, j.w.Data[lo*rb:hi*rb], bf16, rb, hi-lo, blocks, j.x64[t*cols:(t+1)*cols])
	for r := lo; r < hi; r++ {
		s := sums[r-lo]
		row := j.w.Data[r*rb : (r+1)*rb]
		for c := blocks * 16; c < cols; c++ {
			s += float64(elemAt(row, c, bf16)) * float64(x[c])
		}
		dst[r] = float32(s)
	}
	f64Bufs.Put(sb)
}

func elemAt(w []byte, c int, bf16 bool) float32 {
	if bf16 {
		return bf16At(w, c)
	}
	return f32At(w, c)
}

// dotF64Generic is the reference of MatVecF64Acc for one row.
func dotF64Generic(w []byte, bf16 bool, x []float32) float64 {
	var l [16]float64
	n := len(x)
	c := 0
	for ; c+16 <= n; c += 16 {
		for k := range l {
			l[k] += float64(elemAt(w, c+k, bf16)) * float64(x[c+k])
		}
	}
	var m [8]float64
	for i := range m {
		m[i] = l[i] + l[i+8]
	}
	s := ((m[0] + m[4]) + (m[1] + m[5])) + ((m[2] + m[6]) + (m[3] + m[7]))
	for ; c < n; c++ {
		s += float64(elemAt(w, c, bf16)) * float64(x[c])
	}
	return s
}

// dotGeneric is the reference of Dot.
func dotGeneric(a, b []float32) float32 {
	var l [32]float32
	n := len(a)
	c := 0
	for ; c+32 <= n; c += 32 {
		as, bs := a[c:c+32:c+32], b[c:c+32:c+32]
		for k := range l {
			l[k] += float32(as[k] * bs[k])
		}
	}
	return dotTail(fold32(&l), a[c:], b[c:])
}

// fold32 reduces 32 lanes: l_i + l_{i+16}, then + l_{i+8}, then the 8-lane
// tree.
func fold32(l *[32]float32) float32 {
	var p [16]float32
	for i := range p {
		p[i] = l[i] + l[i+16]
	}
	var q [8]float32
	for i := range q {
		q[i] = p[i] + p[i+8]
	}
	return ((q[0] + q[4]) + (q[1] + q[5])) + ((q[2] + q[6]) + (q[3] + q[7]))
}

func dotTail(s float32, a, b []float32) float32 {
	for i := range a {
		s += float32(a[i] * b[i])
	}
	return s
}

// axpyGeneric is the reference of Axpy.
func axpyGeneric(y []float32, a float32, x []float32) {
	for i := range y {
		y[i] += float32(a * x[i])
	}
}
