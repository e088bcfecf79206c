package tensor

import (
	"encoding/binary"
	"fmt"
	"math"
)

// selfCheck runs an implementation's kernels on small deterministic inputs
// (widths around the vector sizes, mat-vec and mat-mat) and compares them
// with the generic kernels within the documented error bound, and each
// token of a batch with the one-token call bit for bit. It runs once per
// implementation at start-up.
func selfCheck(impl *Impl) error {
	if impl.MatBF16 == nil || impl.MatF32 == nil {
		return fmt.Errorf("missing kernels")
	}
	seed := uint32(12345)
	rnd := func() float32 {
		seed = seed*1664525 + 1013904223
		return float32(int32(seed>>8)-1<<23) / (1 << 23)
	}
	for _, shape := range [][3]int{{13, 45, 1}, {13, 45, 7}, {9, 64, 1}, {9, 64, 5}, {70, 150, 9}} {
		rows, cols, n := shape[0], shape[1], shape[2]
		x := make([]float32, n*cols)
		for i := range x {
			x[i] = rnd()
		}
		for _, dt := range []DType{BF16, F32} {
			w := make([]byte, rows*cols*dt.Size())
			for i := 0; i < rows*cols; i++ {
				v := rnd()
				if dt == BF16 {
					binary.LittleEndian.PutUint16(w[2*i:], F32ToBF16(v))
				} else {
					binary.LittleEndian.PutUint32(w[4*i:], math.Float32bits(v))
				}
			}
			k, ref := impl.MatF32, genericImpl.MatF32
			if dt == BF16 {
				k, ref = impl.MatBF16, genericImpl.MatBF16
			}
			stride := rows + 3
			got := make([]float32, n*stride)
			want := make([]float32, n*stride)
			one := make([]float32, rows)
			for i := range got {
				got[i] = 7
			}
			k(got, stride, w, rows, cols, x, n)
			ref(want, stride, w, rows, cols, x, n)
			m := Mat{DType: dt, Rows: rows, Cols: cols, Data: w}
			wr := make([]float32, cols)
			for t := 0; t < n; t++ {
				xt := x[t*cols : (t+1)*cols]
				k(one, rows, w, rows, cols, xt, 1)
				for r := 0; r < rows; r++ {
					g, e := got[t*stride+r], want[t*stride+r]
					if math.Float32bits(g) != math.Float32bits(one[r]) {
						return fmt.Errorf("%s %dx%d n=%d: token %d row %d: batched %v != single %v", dt, rows, cols, n, t, r, g, one[r])
					}
					m.Row(wr, r)
					if d, b := math.Abs(float64(g)-float64(e)), ErrorBound(wr, xt); d > b {
						return fmt.Errorf("%s %dx%d n=%d: token %d row %d: %v, generic %v (|Δ| %g > bound %g)", dt, rows, cols, n, t, r, g, e, d, b)
					}
				}
				for r := rows; r < stride; r++ {
					if got[t*stride+r] != 7 {
						return fmt.Errorf("%s %dx%d n=%d: wrote outside its rows", dt, rows, cols, n)
					}
				}
			}
		}
	}
	return checkVec(impl, rnd)
}

// checkVec compares the vector helpers with the generic ones bit for bit
// (their order is the same on every implementation).
func checkVec(impl *Impl, rnd func() float32) error {
	o := impl.ops()
	for _, n := range []int{0, 5, 32, 77, 130} {
		a, b := make([]float32, n), make([]float32, n)
		for i := range a {
			a[i], b[i] = rnd(), rnd()
		}
		if g, w := o.dot(a, b), dotGeneric(a, b); math.Float32bits(g) != math.Float32bits(w) {
			return fmt.Errorf("Dot n=%d: %v, generic %v", n, g, w)
		}
		y1, y2 := append([]float32(nil), b...), append([]float32(nil), b...)
		o.axpy(y1, 0.37, a)
		axpyGeneric(y2, 0.37, a)
		for i := range y1 {
			if math.Float32bits(y1[i]) != math.Float32bits(y2[i]) {
				return fmt.Errorf("Axpy n=%d: element %d: %v, generic %v", n, i, y1[i], y2[i])
			}
		}
	}
	if o.rowsF64 == nil {
		return nil
	}
	const rows, cols = 5, 80
	x := make([]float32, cols)
	x64 := make([]float64, cols)
	for i := range x {
		x[i] = rnd()
		x64[i] = float64(x[i])
	}
	for _, dt := range []DType{BF16, F32} {
		w := make([]byte, rows*cols*dt.Size())
		for i := 0; i < rows*cols; i++ {
			if dt == BF16 {
				binary.LittleEndian.PutUint16(w[2*i:], F32ToBF16(rnd()))
			} else {
				binary.LittleEndian.PutUint32(w[4*i:], math.Float32bits(rnd()))
			}
		}
		got := make([]float64, rows)
		o.rowsF64(got, w, dt == BF16, cols*dt.Size(), rows, cols/16, x64)
		for r := 0; r < rows; r++ {
			want := dotF64Generic(w[r*cols*dt.Size():(r+1)*cols*dt.Size()], dt == BF16, x)
			if math.Float64bits(got[r]) != math.Float64bits(want) {
				return fmt.Errorf("MatVecF64Acc %s row %d: %v, generic %v", dt, r, got[r], want)
			}
		}
	}
	return nil
}

// ErrorBound returns the bound within which every implementation's dot
// product of w and x agrees with the generic one:
//
//	|got − generic| ≤ (len/4 + 64)·2⁻²⁴·Σ|w_c·x_c| + len·2⁻¹⁴⁹
//
// Each is a sum of len f32 products accumulated over at most len/8 + 8
// rounded additions per lane (chunks, then a 4-level tree, then the tail),
// so each differs from the exact sum by at most (len/8 + 10)·u·Σ|w·x|
// (u = 2⁻²⁴, to first order); the bound doubles that for the two kernels and
// adds slack. The absolute term covers results in the subnormal range.
//
// Non-finite products are left out of Σ: they decide the class of the
// result (NaN, ±Inf), not its rounding.
func ErrorBound(w, x []float32) float64 {
	var s float64
	for c := range w {
		if p := math.Abs(float64(w[c]) * float64(x[c])); !math.IsInf(p, 0) && p == p {
			s += p
		}
	}
	n := float64(len(w))
	return (n/4+64)*0x1p-24*s + n*0x1p-149
}
