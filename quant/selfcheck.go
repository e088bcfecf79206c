package quant

import (
	"fmt"
	"math"
)

// selfCheck runs an implementation on small deterministic MXFP4 inputs
// (including scale bytes 0, 0xFE and 0xFF, and infinite activations in a
// skipped group), mat-vec and mat-mat, and compares it with the generic
// kernel within ErrorBound and each batched token with the one-token call
// bit for bit. It runs once per implementation at start-up.
func selfCheck(impl *Impl) error {
	if impl.Mat == nil {
		return fmt.Errorf("missing kernel")
	}
	seed := uint32(777)
	next := func() uint32 {
		seed = seed*1664525 + 1013904223
		return seed >> 8
	}
	for _, shape := range [][3]int{{7, 32, 1}, {7, 96, 3}, {13, 64, 1}, {13, 64, 7}, {70, 544, 9}} {
		rows, cols, n := shape[0], shape[1], shape[2]
		m := Matrix{Rows: rows, Cols: cols, Packed: make([]byte, rows*cols/2), Scales: make([]byte, rows*cols/GroupSize)}
		for i := range m.Packed {
			m.Packed[i] = byte(next())
		}
		for i := range m.Scales {
			m.Scales[i] = byte(110 + next()%30)
		}
		m.Scales[0] = 0
		if rows > 5 {
			m.Scales[5*cols/GroupSize] = SkipScale
			m.Scales[3*cols/GroupSize+cols/GroupSize-1] = 0xFE
		}
		x := make([]float32, n*cols)
		for i := range x {
			x[i] = float32(int32(next())-1<<23) / (1 << 21)
		}
		if rows > 5 {
			x[0] = float32(math.Inf(1)) // row 5 skips group 0
		}
		stride := rows + 2
		got := make([]float32, n*stride)
		want := make([]float32, n*stride)
		one := make([]float32, rows)
		for i := range got {
			got[i] = 7
		}
		impl.Mat(got, stride, m.Packed, m.Scales, rows, cols, x, n)
		genericImpl.Mat(want, stride, m.Packed, m.Scales, rows, cols, x, n)
		wr := make([]float32, cols)
		for t := 0; t < n; t++ {
			xt := x[t*cols : (t+1)*cols]
			impl.Mat(one, rows, m.Packed, m.Scales, rows, cols, xt, 1)
			for r := 0; r < rows; r++ {
				g, e := got[t*stride+r], want[t*stride+r]
				if math.Float32bits(g) != math.Float32bits(one[r]) && !(g != g && one[r] != one[r]) {
					return fmt.Errorf("%dx%d n=%d: token %d row %d: batched %v != single %v", rows, cols, n, t, r, g, one[r])
				}
				m.DequantizeRow(wr, r)
				if !withinBound(g, e, wr, xt) {
					return fmt.Errorf("%dx%d n=%d: token %d row %d: %v, generic %v (bound %g)", rows, cols, n, t, r, g, e, ErrorBound(wr, xt))
				}
			}
			for r := rows; r < stride; r++ {
				if got[t*stride+r] != 7 {
					return fmt.Errorf("%dx%d n=%d: wrote outside its rows", rows, cols, n)
				}
			}
		}
	}
	return nil
}

// withinBound reports whether got agrees with the generic result want:
// bit-identical, or both NaN, or the same infinity, or finite and within
// ErrorBound. Where the partial sums can leave the f32 range (Σ|w·x| over
// finite products above 2^126, or a dequantised weight that overflowed)
// the result depends on the summation order and any value is accepted.
func withinBound(got, want float32, w, x []float32) bool {
	if math.Float32bits(got) == math.Float32bits(want) || (got != got && want != want) {
		return true
	}
	var mag float64
	for c := range w {
		if math.IsInf(float64(w[c]), 0) {
			return true
		}
		if p := math.Abs(float64(w[c]) * float64(x[c])); !math.IsInf(p, 0) && p == p {
			mag += p
		}
	}
	if mag > 0x1p126 {
		return true
	}
	switch {
	case want != want:
		return got != got
	case math.IsInf(float64(want), 0):
		return got == want
	case got != got || math.IsInf(float64(got), 0):
		return false
	}
	return math.Abs(float64(got)-float64(want)) <= ErrorBound(w, x)
}

// ErrorBound returns the bound within which every implementation's MXFP4
// dot product of a row (dequantised values w) with x agrees with the
// generic kernel:
//
//	|got − generic| ≤ (len/4 + 64)·2⁻²⁴·Σ|w_c·x_c| + len·2⁻¹⁴⁹
//
// The generic kernel sums 8 lanes per group of 32, reduces them, scales and
// adds groups in order (≤ len/32 + 8 rounded operations per term); the SIMD
// kernels multiply exact f32 weights and accumulate len/L chunks per lane
// before a 4-level tree. Each is within (len/8 + 10)·u·Σ|w·x| of the exact
// sum (u = 2⁻²⁴); the bound doubles that and adds slack. Non-finite products
// are left out of Σ (they decide the result's class, not its rounding); the
// absolute term covers results in the subnormal range.
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
