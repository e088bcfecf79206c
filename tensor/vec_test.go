package tensor

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/k3go/k3/internal/platform/kernel/kerneltest"
)

// The vector helpers have one order for every implementation: each is
// compared bit for bit with the generic reference, on misaligned slices of
// every length up to 140, with NaN/Inf sprinkled in.
func TestDotAxpyBitIdentical(t *testing.T) {
	kerneltest.AllImplementations(t, pkg, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(11, 11))
		for n := 0; n <= 140; n++ {
			for rep := 0; rep < 3; rep++ {
				off := rng.IntN(8)
				buf := make([]float32, 2*(n+off)+32)
				a := buf[off : off+n]
				b := buf[off+n+3 : off+2*n+3]
				for i := range a {
					a[i], b[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64()*1e3)
					if rep == 2 && rng.IntN(30) == 0 {
						a[i] = []float32{float32(math.NaN()), float32(math.Inf(1)), 0}[rng.IntN(3)]
					}
				}
				if g, w := Dot(a, b), dotGeneric(a, b); !same(g, w) {
					t.Fatalf("Dot n=%d: %v, generic %v", n, g, w)
				}
				y1 := append([]float32(nil), b...)
				y2 := append([]float32(nil), b...)
				Axpy(y1, -1.25, a)
				axpyGeneric(y2, -1.25, a)
				for i := range y1 {
					if !same(y1[i], y2[i]) {
						t.Fatalf("Axpy n=%d element %d: %v, generic %v", n, i, y1[i], y2[i])
					}
				}
			}
		}
	})
}

func TestDotAccuracy(t *testing.T) {
	rng := rand.New(rand.NewPCG(12, 12))
	a, b := make([]float32, 1000), make([]float32, 1000)
	var exact float64
	for i := range a {
		a[i], b[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
		exact += float64(a[i]) * float64(b[i])
	}
	if d := math.Abs(float64(Dot(a, b)) - exact); d > ErrorBound(a, b) {
		t.Fatalf("Dot off by %g", d)
	}
}

// TestMatVecF64Acc checks that the router kernel is bit-identical across
// implementations, between a BF16 matrix and its F32 widening, for any
// split, and close to the exact sum.
func TestMatVecF64Acc(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 13))
	for _, shape := range [][2]int{{1, 1}, {7, 15}, {33, 16}, {67, 100}, {384, 7168}} {
		rows, cols := shape[0], shape[1]
		off := rng.IntN(64)
		wbf := make([]byte, off+rows*cols*2)[off:]
		wf := make([]byte, rows*cols*4)
		for i := 0; i < rows*cols; i++ {
			h := F32ToBF16(float32(rng.NormFloat64()))
			binary.LittleEndian.PutUint16(wbf[2*i:], h)
			binary.LittleEndian.PutUint32(wf[4*i:], math.Float32bits(BF16ToF32(h)))
		}
		x := make([]float32, cols)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		mb := Mat{DType: BF16, Rows: rows, Cols: cols, Data: wbf}
		mf := Mat{DType: F32, Rows: rows, Cols: cols, Data: wf}
		ref := make([]float32, rows)
		for r := range ref {
			ref[r] = float32(dotF64Generic(wbf[r*cols*2:(r+1)*cols*2], true, x))
		}
		kerneltest.AllImplementations(t, pkg, func(t *testing.T) {
			for _, m := range []Mat{mb, mf} {
				for _, run := range []Runner{nil, splitRunner{1}, splitRunner{7}} {
					buf, got := guarded(rows)
					MatVecF64Acc(run, got, m, x)
					checkGuards(t, buf, rows)
					for r := range got {
						if math.Float32bits(got[r]) != math.Float32bits(ref[r]) {
							t.Fatalf("%dx%d %s row %d: %v, reference %v", rows, cols, m.DType, r, got[r], ref[r])
						}
					}
				}
			}
		})
		for r := 0; r < rows; r++ {
			var exact, mag float64
			for c := 0; c < cols; c++ {
				p := float64(BF16ToF32(binary.LittleEndian.Uint16(wbf[2*(r*cols+c):]))) * float64(x[c])
				exact += p
				mag += math.Abs(p)
			}
			if d := math.Abs(float64(ref[r]) - exact); d > 0x1p-24*math.Abs(exact)+float64(cols)*0x1p-50*mag {
				t.Fatalf("row %d: %v vs exact %v", r, ref[r], exact)
			}
		}
	}
}

// FuzzVec compares Dot, Axpy and MatVecF64Acc of every implementation with
// the generic reference, bit for bit.
func FuzzVec(f *testing.F) {
	f.Add(uint64(1), uint16(77), uint8(3), uint8(5), false)
	f.Add(uint64(2), uint16(7168), uint8(1), uint8(0), true)
	f.Fuzz(fuzzVec)
}

func fuzzVec(t *testing.T, seed uint64, n uint16, rows, off uint8, special bool) {
	cols, nr := int(n)%8000, int(rows)%9+1
	rng := rand.New(rand.NewPCG(seed, uint64(off)))
	o := int(off) % 16
	a := make([]float32, cols+o)[o:]
	b := make([]float32, cols)
	for i := range a {
		a[i], b[i] = float32(rng.NormFloat64()), float32(rng.NormFloat64())
		if special && rng.IntN(50) == 0 {
			a[i] = []float32{float32(math.NaN()), float32(math.Inf(-1)), 1e-40}[rng.IntN(3)]
		}
	}
	w := make([]byte, nr*cols*2+o)[o:]
	for i := range w {
		w[i] = byte(rng.Uint32())
	}
	m := Mat{DType: BF16, Rows: nr, Cols: cols, Data: w}
	ref := make([]float32, nr)
	for r := range ref {
		ref[r] = float32(dotF64Generic(w[r*cols*2:(r+1)*cols*2], true, a))
	}
	wantDot := dotGeneric(a, b)
	wantY := append([]float32(nil), b...)
	axpyGeneric(wantY, 0.75, a)
	kerneltest.AllImplementations(t, pkg, func(t *testing.T) {
		if g := Dot(a, b); !same(g, wantDot) {
			t.Fatalf("Dot: %v, generic %v", g, wantDot)
		}
		y := append([]float32(nil), b...)
		Axpy(y, 0.75, a)
		for i := range y {
			if !same(y[i], wantY[i]) {
				t.Fatalf("Axpy element %d: %v, generic %v", i, y[i], wantY[i])
			}
		}
		got := make([]float32, nr)
		MatVecF64Acc(nil, got, m, a)
		for r := range got {
			if !same(got[r], ref[r]) {
				t.Fatalf("MatVecF64Acc row %d: %v, generic %v", r, got[r], ref[r])
			}
		}
	})
}

// TestVecRandomArgs runs FuzzVec's body on generated arguments (see
// kerneltest.RandomArgs: CI uses it for the arm64 kernels under qemu).
func TestVecRandomArgs(t *testing.T) {
	kerneltest.RandomArgs(t, 4, func(t *testing.T, rng *rand.Rand) {
		seed, n, rows, off, special := rng.Uint64(), uint16(rng.Uint32()), uint8(rng.Uint32()), uint8(rng.Uint32()), rng.IntN(2) == 0
		t.Logf("fuzz arguments: uint64(%d), uint16(%d), uint8(%d), uint8(%d), bool(%v)", seed, n, rows, off, special)
		fuzzVec(t, seed, n, rows, off, special)
	})
}

// TestMatMulF64Acc checks that the multi-row router kernel gives every row
// exactly the bits of MatVecF64Acc on that row alone, on every
// implementation, for any number of rows and any split, with misaligned
// inputs.
func TestMatMulF64Acc(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 5))
	for _, shape := range [][3]int{{1, 1, 1}, {7, 15, 3}, {33, 16, 2}, {67, 100, 5}, {96, 7168, 9}, {40, 33, 64}} {
		rows, cols, n := shape[0], shape[1], shape[2]
		off := rng.IntN(64)
		wbf := make([]byte, off+rows*cols*2)[off:]
		for i := 0; i < rows*cols; i++ {
			binary.LittleEndian.PutUint16(wbf[2*i:], F32ToBF16(float32(rng.NormFloat64())))
		}
		xoff := rng.IntN(7)
		x := make([]float32, xoff+n*cols)[xoff:]
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		m := Mat{DType: BF16, Rows: rows, Cols: cols, Data: wbf}
		kerneltest.AllImplementations(t, pkg, func(t *testing.T) {
			ref := make([]float32, n*rows)
			for tk := 0; tk < n; tk++ {
				MatVecF64Acc(nil, ref[tk*rows:(tk+1)*rows], m, x[tk*cols:(tk+1)*cols])
			}
			for _, run := range []Runner{nil, splitRunner{1}, splitRunner{7}} {
				buf, got := guarded(n * rows)
				MatMulF64Acc(run, got, m, x, n)
				checkGuards(t, buf, n*rows)
				for i := range got {
					if math.Float32bits(got[i]) != math.Float32bits(ref[i]) {
						t.Fatalf("%dx%d n=%d: row %d output %d: %v, single-row %v", rows, cols, n, i/rows, i%rows, got[i], ref[i])
					}
				}
			}
		})
	}
}
