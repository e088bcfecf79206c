package quant

import (
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/k3go/k3/internal/platform/kernel/kerneltest"
	"github.com/k3go/k3/tensor"
)

var pkg = kerneltest.Package{Name: "quant", Status: reg.All, Set: SetImplementation, Current: Implementation}

// TestSelectedImplementation fails when this machine does not run the
// fastest MXFP4 kernels it supports, unless K3_KERNELS or GODEBUG asked for
// less.
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

// mxCase is one randomised MXFP4 input placed at the given misalignments
// inside 0xAA-padded buffers, with x inside NaN padding.
type mxCase struct {
	rows, cols, n    int
	poff, soff, xoff int
	pbuf, sbuf, save []byte
	m                Matrix
	xbuf, x          []float32
}

// scaleMode selects the scale bytes: 0 realistic (110..140), 1 any byte
// including 0, 0x7F, 0xFD, 0xFE, 0xFF.
func newMXCase(rng *rand.Rand, rows, cols, n, scaleMode int, specialX bool) *mxCase {
	c := &mxCase{rows: rows, cols: cols, n: n, poff: rng.IntN(64), soff: rng.IntN(64), xoff: rng.IntN(16)}
	pn, sn := rows*cols/2, rows*cols/GroupSize
	c.pbuf = make([]byte, c.poff+pn+64)
	c.sbuf = make([]byte, c.soff+sn+64)
	for i := range c.pbuf {
		c.pbuf[i] = 0xAA
	}
	for i := range c.sbuf {
		c.sbuf[i] = 0xAA
	}
	c.m = Matrix{Rows: rows, Cols: cols, Packed: c.pbuf[c.poff : c.poff+pn : c.poff+pn], Scales: c.sbuf[c.soff : c.soff+sn : c.soff+sn]}
	for i := range c.m.Packed {
		c.m.Packed[i] = byte(rng.Uint32())
	}
	for i := range c.m.Scales {
		if scaleMode == 1 && rng.IntN(4) == 0 {
			c.m.Scales[i] = []byte{0, 1, 0x7F, 0xFC, 0xFD, 0xFE, 0xFF, byte(rng.Uint32())}[rng.IntN(8)]
		} else {
			c.m.Scales[i] = byte(110 + rng.IntN(30))
		}
	}
	c.save = append(append([]byte(nil), c.pbuf...), c.sbuf...)
	c.xbuf = make([]float32, c.xoff+n*cols+16)
	for i := range c.xbuf {
		c.xbuf[i] = sentinel
	}
	c.x = c.xbuf[c.xoff : c.xoff+n*cols : c.xoff+n*cols]
	for i := range c.x {
		c.x[i] = float32(rng.NormFloat64())
		if specialX && rng.IntN(60) == 0 {
			c.x[i] = []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 0, 1e-42}[rng.IntN(5)]
		}
	}
	return c
}

func (c *mxCase) checkInputs(t *testing.T) {
	t.Helper()
	now := append(append([]byte(nil), c.pbuf...), c.sbuf...)
	for i := range now {
		if now[i] != c.save[i] {
			t.Fatalf("packed/scale bytes or their padding changed at %d", i)
		}
	}
	for i, v := range c.xbuf {
		if (i < c.xoff || i >= c.xoff+len(c.x)) && math.Float32bits(v) != math.Float32bits(sentinel) {
			t.Fatalf("x padding changed")
		}
	}
}

// run checks the selected implementation on c against the generic kernel.
func (c *mxCase) run(t *testing.T) {
	t.Helper()
	rows, cols, n := c.rows, c.cols, c.n
	buf, got := guarded(n * rows)
	MatMul(nil, got, c.m, c.x, n)
	checkGuards(t, buf, n*rows)
	c.checkInputs(t)
	want := make([]float32, n*rows)
	matGeneric(want, rows, c.m.Packed, c.m.Scales, rows, cols, c.x, n)
	wr := make([]float32, cols)
	obuf, one := guarded(rows)
	for tk := 0; tk < n; tk++ {
		xt := c.x[tk*cols : (tk+1)*cols]
		MatVec(nil, one, c.m, xt)
		checkGuards(t, obuf, rows)
		for r := 0; r < rows; r++ {
			g, e := got[tk*rows+r], want[tk*rows+r]
			if !same(g, one[r]) {
				t.Fatalf("%dx%d n=%d: token %d row %d: batched %v (%#x) != single %v (%#x)", rows, cols, n, tk, r, g, math.Float32bits(g), one[r], math.Float32bits(one[r]))
			}
			c.m.DequantizeRow(wr, r)
			if !withinBound(g, e, wr, xt) {
				t.Fatalf("%dx%d n=%d (offsets %d/%d/%d): token %d row %d: got %v, generic %v, bound %g, scales %v",
					rows, cols, n, c.poff, c.soff, c.xoff, tk, r, g, e, ErrorBound(wr, xt), c.m.Scales[r*cols/GroupSize:(r+1)*cols/GroupSize])
			}
		}
	}
	c.checkInputs(t)
}

func TestMXFP4AllShapes(t *testing.T) {
	kerneltest.AllImplementations(t, pkg, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 1))
		for rows := 1; rows <= 67; rows++ {
			for _, cols := range []int{32, 64, 96, 160} {
				newMXCase(rng, rows, cols, 1+rng.IntN(6), 0, false).run(t)
			}
		}
		for cols := 32; cols <= 32*20; cols += 32 {
			for _, rows := range []int{1, 3, 4, 5, 9} {
				newMXCase(rng, rows, cols, 1+rng.IntN(9), rng.IntN(2), false).run(t)
			}
		}
	})
}

// TestMXFP4Blocking crosses the blocking boundaries of the SIMD paths (row
// tiles, 512-column blocks, 64-token blocks) and uses the K3 widths.
func TestMXFP4Blocking(t *testing.T) {
	kerneltest.AllImplementations(t, pkg, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(2, 2))
		for _, s := range [][3]int{{100, 1056, 70}, {50, 512, 64}, {130, 544, 9}, {65, 3584, 13}, {9, 3072, 3}, {3, 1024, 65}, {33, 1056, 8}, {17, 320, 7}, {6, 64, 5}, {5, 96, 6}} {
			newMXCase(rng, s[0], s[1], s[2], 0, false).run(t)
			newMXCase(rng, s[0], s[1], s[2], 1, false).run(t)
		}
	})
}

// TestMXFP4SpecialValues covers scale bytes 0 (2^-127, subnormal weights),
// 0x7F, 0xFD, 0xFE (weights that can overflow f32) and 0xFF (group
// skipped), and NaN/±Inf/0/subnormal activations. Propagation, for every
// implementation: a group with scale 0xFF contributes nothing, whatever x
// holds there; otherwise a NaN in x, or an Inf times a zero weight (codes 0
// and 8 are ±0), makes the row NaN, and an Inf times a nonzero weight makes
// it ±Inf unless infinities of both signs meet. Rows holding a scale byte
// above 252 are computed by the generic kernel in every implementation.
func TestMXFP4SpecialValues(t *testing.T) {
	kerneltest.AllImplementations(t, pkg, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 3))
		for k := 0; k < 150; k++ {
			newMXCase(rng, 1+rng.IntN(40), 32*(1+rng.IntN(20)), 1+rng.IntN(9), 1, true).run(t)
		}
	})
}

// TestMXFP4AllCodes multiplies every E2M1 code at every position of a group
// by distinct powers of two: the result is exact in every implementation.
func TestMXFP4AllCodes(t *testing.T) {
	kerneltest.AllImplementations(t, pkg, func(t *testing.T) {
		for _, sc := range []byte{0, 1, 0x7F, 130, 0xFC} {
			for shift := 0; shift < 16; shift++ {
				m := Matrix{Rows: 1, Cols: 32, Packed: make([]byte, 16), Scales: []byte{sc}}
				for j := range m.Packed {
					lo, hi := byte((2*j+shift)%16), byte((2*j+1+shift)%16)
					m.Packed[j] = lo | hi<<4
				}
				x := make([]float32, 32)
				row := make([]float32, 32)
				m.DequantizeRow(row, 0)
				var want float64
				for c := range x {
					x[c] = float32(math.Ldexp(1, 2*c-40)) // distinct, non-overlapping bits
					want += float64(row[c]) * float64(x[c])
				}
				got := make([]float32, 1)
				MatVec(nil, got, m, x)
				if float64(got[0]) != float64(float32(want)) && math.Abs(float64(got[0])-want) > ErrorBound(row, x) {
					t.Fatalf("scale %#x shift %d: got %v want %v", sc, shift, got[0], want)
				}
			}
		}
	})
}

// TestMXFP4SkipScaleAll checks scale 255 with infinite activations in every
// implementation (the existing TestSkipScale covers only the selected one).
func TestMXFP4SkipScaleAll(t *testing.T) {
	kerneltest.AllImplementations(t, pkg, TestSkipScale)
}

// TestFixtureAllImplementations runs the real-checkpoint fixture through
// every implementation, mat-vec and mat-mat.
func TestFixtureAllImplementations(t *testing.T) {
	kerneltest.AllImplementations(t, pkg, func(t *testing.T) {
		TestFixtureMatVec(t)
		m, _ := loadMXFP4Fixture(t)
		rng := rand.New(rand.NewPCG(9, 9))
		const n = 11
		x := make([]float32, n*m.Cols)
		for i := range x {
			x[i] = float32(rng.NormFloat64())
		}
		got := make([]float32, n*m.Rows)
		MatMul(nil, got, m, x, n)
		one := make([]float32, m.Rows)
		row := make([]float32, m.Cols)
		for tk := 0; tk < n; tk++ {
			xt := x[tk*m.Cols : (tk+1)*m.Cols]
			MatVec(nil, one, m, xt)
			for r := 0; r < m.Rows; r++ {
				if !same(got[tk*m.Rows+r], one[r]) {
					t.Fatalf("token %d row %d: batched %v != single %v", tk, r, got[tk*m.Rows+r], one[r])
				}
				m.DequantizeRow(row, r)
				var want, mag float64
				for c := range row {
					want += float64(row[c]) * float64(xt[c])
					mag += math.Abs(float64(row[c]) * float64(xt[c]))
				}
				if d := math.Abs(float64(one[r]) - want); d > 1e-6*mag+1e-30 {
					t.Fatalf("token %d row %d: got %v want %v", tk, r, one[r], want)
				}
			}
		}
	})
}

type splitRunner struct{ chunk int }

func (s splitRunner) Run(n, grain int, job tensor.RangeJob) {
	var wg sync.WaitGroup
	for lo := 0; lo < n; lo += s.chunk {
		wg.Go(func() { job.Range(lo, min(lo+s.chunk, n)) })
	}
	wg.Wait()
}

// TestMXFP4SplitInvariance checks bit-identical results for any split of
// the rows into chunks run concurrently.
func TestMXFP4SplitInvariance(t *testing.T) {
	kerneltest.AllImplementations(t, pkg, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(4, 4))
		for _, s := range [][3]int{{131, 320, 1}, {131, 320, 5}, {97, 1088, 67}} {
			for mode := 0; mode < 2; mode++ {
				c := newMXCase(rng, s[0], s[1], s[2], mode, false)
				ref := make([]float32, c.n*c.rows)
				MatMul(nil, ref, c.m, c.x, c.n)
				for _, chunk := range []int{1, 2, 3, 7, 13, 64, 1000} {
					got := make([]float32, c.n*c.rows)
					MatMul(splitRunner{chunk}, got, c.m, c.x, c.n)
					for i := range got {
						if !same(got[i], ref[i]) {
							t.Fatalf("%v chunk %d: element %d: %v != %v", s, chunk, i, got[i], ref[i])
						}
					}
				}
			}
		}
	})
}

// TestMXFP4KernelStride calls the kernels directly with a dst stride wider
// than the rows.
func TestMXFP4KernelStride(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	for _, s := range ImplementationStatus() {
		if !s.Available {
			continue
		}
		impl, _ := reg.Lookup(s.Name)
		c := newMXCase(rng, 37, 96, 5, 1, false)
		stride := c.rows + 11
		buf, dst := guarded(c.n * stride)
		impl.Mat(dst, stride, c.m.Packed, c.m.Scales, c.rows, c.cols, c.x, c.n)
		checkGuards(t, buf, c.n*stride)
		want := make([]float32, c.n*stride)
		matGeneric(want, stride, c.m.Packed, c.m.Scales, c.rows, c.cols, c.x, c.n)
		wr := make([]float32, c.cols)
		for tk := 0; tk < c.n; tk++ {
			for r := 0; r < stride && tk*stride+r < len(dst); r++ {
				g := dst[tk*stride+r]
				if r >= c.rows {
					if !same(g, sentinel) {
						t.Fatalf("%s: wrote into the stride gap", s.Name)
					}
					continue
				}
				c.m.DequantizeRow(wr, r)
				if !withinBound(g, want[tk*stride+r], wr, c.x[tk*c.cols:(tk+1)*c.cols]) {
					t.Fatalf("%s: token %d row %d: %v vs %v", s.Name, tk, r, g, want[tk*stride+r])
				}
			}
		}
	}
}

func FuzzMatMulMXFP4(f *testing.F) {
	f.Add(uint64(1), uint8(5), uint8(3), uint8(3), uint8(7), false)
	f.Add(uint64(2), uint8(64), uint8(17), uint8(9), uint8(1), true)
	f.Add(uint64(3), uint8(1), uint8(1), uint8(1), uint8(63), true)
	f.Fuzz(fuzzMXFP4)
}

func fuzzMXFP4(t *testing.T, seed uint64, rows, groups, n, off uint8, special bool) {
	r, g, nn := int(rows)%80+1, int(groups)%40+1, int(n)%70+1
	mode := 0
	if special {
		mode = 1
	}
	kerneltest.AllImplementations(t, pkg, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(seed, uint64(off)))
		newMXCase(rng, r, 32*g, nn, mode, special && off%2 == 0).run(t)
	})
}

// TestMXFP4RandomArgs runs FuzzMatMulMXFP4's body on generated arguments
// (see kerneltest.RandomArgs: CI uses it for the arm64 kernels under qemu).
func TestMXFP4RandomArgs(t *testing.T) {
	kerneltest.RandomArgs(t, 4, func(t *testing.T, rng *rand.Rand) {
		u := func() uint8 { return uint8(rng.Uint32()) }
		seed, rows, groups, n, off, special := rng.Uint64(), u(), u(), u()%16, u(), rng.IntN(2) == 0
		t.Logf("fuzz arguments: uint64(%d), uint8(%d), uint8(%d), uint8(%d), uint8(%d), bool(%v)", seed, rows, groups, n, off, special)
		fuzzMXFP4(t, seed, rows, groups, n, off, special)
	})
}
