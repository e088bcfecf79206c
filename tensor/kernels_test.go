package tensor

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/k3go/k3/internal/platform/kernel/kerneltest"
)

var pkg = kerneltest.Package{Name: "tensor", Status: reg.All, Set: SetImplementation, Current: Implementation}

// TestSelectedImplementation fails when this machine does not run the
// fastest kernels it supports (AVX-512 where present, else AVX2+FMA), unless
// K3_KERNELS or GODEBUG asked for less.
func TestSelectedImplementation(t *testing.T) {
	kerneltest.CheckSelected(t, pkg)
	t.Logf("selected %s; %v", Implementation(), ImplementationStatus())
}

// The guard bands around every dst, shared with quant and tensor's other
// kernel tests.
var (
	sentinel    = kerneltest.Sentinel
	guarded     = kerneltest.Guarded
	checkGuards = kerneltest.CheckGuards
	same        = kerneltest.Same
)

// denseCase is one randomised input: a weight matrix and x placed at the
// given misalignments inside padded buffers.
type denseCase struct {
	dt            DType
	rows, cols, n int
	woff, xoff    int
	wbuf, wsave   []byte
	w             Mat
	xbuf, x       []float32
	special       bool // sprinkle NaN/Inf/0/subnormal values
}

func newDenseCase(rng *rand.Rand, dt DType, rows, cols, n int, special bool) *denseCase {
	c := &denseCase{dt: dt, rows: rows, cols: cols, n: n, woff: rng.IntN(64), xoff: rng.IntN(16), special: special}
	size := rows * cols * dt.Size()
	c.wbuf = make([]byte, c.woff+size+64)
	for i := range c.wbuf {
		c.wbuf[i] = 0xAA
	}
	data := c.wbuf[c.woff : c.woff+size : c.woff+size]
	for i := 0; i < rows*cols; i++ {
		v := float32(rng.NormFloat64())
		if special && rng.IntN(50) == 0 {
			v = []float32{0, float32(math.Copysign(0, -1)), 1e-40, -3e-39, 1e30}[rng.IntN(5)]
		}
		if dt == BF16 {
			binary.LittleEndian.PutUint16(data[2*i:], F32ToBF16(v))
		} else {
			binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
		}
	}
	c.wsave = append([]byte(nil), c.wbuf...)
	c.w = Mat{DType: dt, Rows: rows, Cols: cols, Data: data}
	c.xbuf = make([]float32, c.xoff+n*cols+16)
	for i := range c.xbuf {
		c.xbuf[i] = sentinel
	}
	c.x = c.xbuf[c.xoff : c.xoff+n*cols : c.xoff+n*cols]
	for i := range c.x {
		c.x[i] = float32(rng.NormFloat64())
		if special && rng.IntN(40) == 0 {
			c.x[i] = []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0, 1e-42}[rng.IntN(5)]
		}
	}
	return c
}

// checkInputs fails if a kernel wrote to its inputs or their padding.
func (c *denseCase) checkInputs(t *testing.T) {
	t.Helper()
	for i := range c.wbuf {
		if c.wbuf[i] != c.wsave[i] {
			t.Fatalf("weights or their padding changed at byte %d (offset %d)", i, c.woff)
		}
	}
	for i := 0; i < c.xoff; i++ {
		if math.Float32bits(c.xbuf[i]) != math.Float32bits(sentinel) {
			t.Fatalf("x padding changed")
		}
	}
	for _, v := range c.xbuf[c.xoff+len(c.x):] {
		if math.Float32bits(v) != math.Float32bits(sentinel) {
			t.Fatalf("x padding changed")
		}
	}
}

// agree reports whether got matches the generic result want: the same NaN
// or infinity class, or finite and within ErrorBound.
func agree(got, want float32, w, x []float32) bool {
	if same(got, want) {
		return true
	}
	var mag float64
	for c := range w {
		if p := math.Abs(float64(w[c]) * float64(x[c])); !math.IsInf(p, 0) && p == p {
			mag += p
		}
	}
	if mag > 0x1p126 {
		return true // partial sums may leave the f32 range: order-dependent
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

// run checks the selected implementation on c: MatMul against the generic
// kernel within the bound, each token bit-identical to its MatVec, guards,
// padding and inputs untouched.
func (c *denseCase) run(t *testing.T) {
	t.Helper()
	rows, cols, n := c.rows, c.cols, c.n
	buf, got := guarded(n * rows)
	MatMul(nil, got, c.w, c.x, n)
	checkGuards(t, buf, n*rows)
	c.checkInputs(t)
	want := make([]float32, n*rows)
	genericImpl.MatMul(want, c.w, c.x, n)
	wr := make([]float32, cols)
	obuf, one := guarded(rows)
	for tk := 0; tk < n; tk++ {
		xt := c.x[tk*cols : (tk+1)*cols]
		MatVec(nil, one, c.w, xt)
		checkGuards(t, obuf, rows)
		for r := 0; r < rows; r++ {
			g, e := got[tk*rows+r], want[tk*rows+r]
			if !same(g, one[r]) {
				t.Fatalf("%s %dx%d n=%d (woff %d xoff %d): token %d row %d: batched %v (%#x) != single %v (%#x)",
					c.dt, rows, cols, n, c.woff, c.xoff, tk, r, g, math.Float32bits(g), one[r], math.Float32bits(one[r]))
			}
			c.w.Row(wr, r)
			if !agree(g, e, wr, xt) {
				t.Fatalf("%s %dx%d n=%d (woff %d xoff %d): token %d row %d: got %v, generic %v, bound %g",
					c.dt, rows, cols, n, c.woff, c.xoff, tk, r, g, e, ErrorBound(wr, xt))
			}
		}
	}
	c.checkInputs(t)
}

// MatMul runs an implementation's kernel directly over all rows.
func (i *Impl) MatMul(dst []float32, w Mat, x []float32, n int) {
	k := i.MatF32
	if w.DType == BF16 {
		k = i.MatBF16
	}
	k(dst, w.Rows, w.Data, w.Rows, w.Cols, x, n)
}

func TestDenseAllShapes(t *testing.T) {
	kerneltest.AllImplementations(t, pkg, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 1))
		for _, dt := range []DType{BF16, F32} {
			for cols := 0; cols <= 67; cols++ {
				for _, rows := range []int{1, 2, 3, 7, 8, 9, 17} {
					newDenseCase(rng, dt, rows, cols, 1+rng.IntN(6), false).run(t)
				}
			}
			for rows := 1; rows <= 67; rows++ {
				for _, cols := range []int{8, 16, 45, 64} {
					newDenseCase(rng, dt, rows, cols, 1+rng.IntN(6), false).run(t)
				}
			}
		}
	})
}

// TestDenseBlocking crosses every blocking boundary of the SIMD paths:
// row tiles (48/64 rows), column blocks (512), token blocks (64) and the
// register blocks, and the K3 widths.
func TestDenseBlocking(t *testing.T) {
	kerneltest.AllImplementations(t, pkg, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(2, 2))
		for _, s := range [][3]int{{100, 1031, 70}, {50, 512, 64}, {130, 520, 9}, {65, 1024, 13}, {7, 7168, 3}, {3, 2048, 65}, {33, 1040, 8}, {17, 333, 7}, {9, 64, 2}} {
			for _, dt := range []DType{BF16, F32} {
				newDenseCase(rng, dt, s[0], s[1], s[2], false).run(t)
			}
		}
	})
}

// TestDenseSpecialValues feeds NaN, ±Inf, ±0 and subnormals. Propagation
// (every implementation): a NaN in x, or an Inf times a zero weight, makes
// the row's result NaN; an Inf times a nonzero weight makes it ±Inf unless
// infinities of both signs meet (NaN); values that would overflow only
// through rounding of finite sums are not covered by this contract.
func TestDenseSpecialValues(t *testing.T) {
	kerneltest.AllImplementations(t, pkg, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 3))
		for k := 0; k < 200; k++ {
			dt := []DType{BF16, F32}[k%2]
			newDenseCase(rng, dt, 1+rng.IntN(20), rng.IntN(100), 1+rng.IntN(7), true).run(t)
		}
	})
}

// splitRunner runs chunks of a fixed size, ignoring the grain, each on its
// own goroutine.
type splitRunner struct{ chunk int }

func (s splitRunner) Run(n, grain int, job RangeJob) {
	var wg sync.WaitGroup
	for lo := 0; lo < n; lo += s.chunk {
		wg.Go(func() { job.Range(lo, min(lo+s.chunk, n)) })
	}
	wg.Wait()
}

// TestDenseSplitInvariance checks that results are bit-identical however
// the rows are split into chunks and spread over goroutines.
func TestDenseSplitInvariance(t *testing.T) {
	kerneltest.AllImplementations(t, pkg, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(4, 4))
		for _, s := range [][3]int{{131, 300, 1}, {131, 300, 5}, {97, 1100, 67}} {
			for _, dt := range []DType{BF16, F32} {
				c := newDenseCase(rng, dt, s[0], s[1], s[2], false)
				ref := make([]float32, c.n*c.rows)
				MatMul(nil, ref, c.w, c.x, c.n)
				for _, chunk := range []int{1, 2, 3, 7, 13, 64, 1000} {
					got := make([]float32, c.n*c.rows)
					MatMul(splitRunner{chunk}, got, c.w, c.x, c.n)
					for i := range got {
						if !same(got[i], ref[i]) {
							t.Fatalf("%s %v chunk %d: element %d: %v != %v", dt, s, chunk, i, got[i], ref[i])
						}
					}
				}
			}
		}
	})
}

// TestDenseKernelStride calls the kernels directly with a dst stride wider
// than the rows: the gaps must stay untouched.
func TestDenseKernelStride(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	for _, s := range ImplementationStatus() {
		if !s.Available {
			continue
		}
		impl, _ := reg.Lookup(s.Name)
		for _, dt := range []DType{BF16, F32} {
			c := newDenseCase(rng, dt, 37, 77, 5, false)
			stride := c.rows + 11
			buf, dst := guarded(c.n * stride)
			impl.MatMul(dst, c.w, c.x, c.n) // contiguous first
			checkGuards(t, buf, c.n*stride)
			buf, dst = guarded(c.n * stride)
			k := impl.MatF32
			if dt == BF16 {
				k = impl.MatBF16
			}
			k(dst, stride, c.w.Data, c.rows, c.cols, c.x, c.n)
			checkGuards(t, buf, c.n*stride)
			for tk := 0; tk < c.n; tk++ {
				for r := c.rows; r < stride && tk*stride+r < len(dst); r++ {
					if !same(dst[tk*stride+r], sentinel) {
						t.Fatalf("%s %s: wrote into the stride gap", s.Name, dt)
					}
				}
			}
		}
	}
}

func FuzzMatMulDense(f *testing.F) {
	f.Add(uint64(1), uint8(5), uint16(45), uint8(3), uint8(7), false)
	f.Add(uint64(2), uint8(64), uint16(520), uint8(9), uint8(0), true)
	f.Add(uint64(3), uint8(1), uint16(1), uint8(1), uint8(63), true)
	f.Fuzz(fuzzDense)
}

func fuzzDense(t *testing.T, seed uint64, rows uint8, cols uint16, n uint8, off uint8, bf16 bool) {
	r, c, nn := int(rows)%80+1, int(cols)%1100, int(n)%70+1
	dt := F32
	if bf16 {
		dt = BF16
	}
	kerneltest.AllImplementations(t, pkg, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(seed, uint64(off)))
		newDenseCase(rng, dt, r, c, nn, off%4 == 0).run(t)
	})
}

// TestDenseRandomArgs runs FuzzMatMulDense's body on generated arguments
// (see kerneltest.RandomArgs: CI uses it for the arm64 kernels under qemu).
func TestDenseRandomArgs(t *testing.T) {
	kerneltest.RandomArgs(t, 4, func(t *testing.T, rng *rand.Rand) {
		seed, rows, cols, n, off, bf16 := rng.Uint64(), uint8(rng.Uint32()), uint16(rng.Uint32()), uint8(rng.IntN(16)), uint8(rng.Uint32()), rng.IntN(2) == 0
		t.Logf("fuzz arguments: uint64(%d), uint8(%d), uint16(%d), uint8(%d), uint8(%d), bool(%v)", seed, rows, cols, n, off, bf16)
		fuzzDense(t, seed, rows, cols, n, off, bf16)
	})
}

func TestErrorBoundExample(t *testing.T) {
	b := ErrorBound([]float32{1, 2}, []float32{3, -4})
	if want := (2.0/4+64)*0x1p-24*11 + 2*0x1p-149; b != want {
		t.Fatal(fmt.Sprint(b, want))
	}
}

// chainGolden is the FNV-64a hash of the outputs of TestEightLaneChainGolden,
// computed by the AVX2 kernels on amd64 and by the NEON kernels under
// qemu-aarch64.
const chainGolden = 0xe23e7855e76ed5d3

// TestEightLaneChainGolden pins the bits of the 8-lane FMA chain that the
// AVX2 and the NEON kernels share (lane c mod 8, one FMA per element, the
// lane tree, then the tail): both must give the same bits on the same
// inputs, mat-vec, direct multi-token and GEMM paths alike, so a model runs
// to the same bits on an x86 and an arm64 machine with these kernels.
func TestEightLaneChainGolden(t *testing.T) {
	ran := false
	for _, name := range []string{"avx2", "neon"} {
		impl, ok := reg.Lookup(name)
		if !ok {
			continue
		}
		ran = true
		rng := rand.New(rand.NewPCG(27, 27))
		h := fnv.New64a()
		var b [4]byte
		for _, s := range [][3]int{{13, 64, 1}, {9, 45, 3}, {70, 1031, 1}, {37, 520, 5}, {50, 264, 12}} {
			for _, dt := range []DType{BF16, F32} {
				c := newDenseCase(rng, dt, s[0], s[1], s[2], false)
				dst := make([]float32, c.n*c.rows)
				impl.MatMul(dst, c.w, c.x, c.n)
				for _, v := range dst {
					binary.LittleEndian.PutUint32(b[:], math.Float32bits(v))
					h.Write(b[:])
				}
			}
		}
		if got := h.Sum64(); got != chainGolden {
			t.Errorf("%s: outputs hash to %#x, want %#x", name, got, uint64(chainGolden))
		}
	}
	if !ran {
		t.Skip("no AVX2 or NEON kernels here")
	}
}
