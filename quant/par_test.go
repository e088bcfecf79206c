package quant_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/k3go/k3/internal/platform/kernel/kerneltest"
	"github.com/k3go/k3/internal/platform/par"
	"github.com/k3go/k3/quant"
	"github.com/k3go/k3/tensor"
)

// TestThreadInvariance checks that every implementation gives bit-identical
// results through internal/platform/par with 1, 2, 3 and 8 threads and odd grains,
// including rows that the SIMD paths hand to the generic kernel.
func TestThreadInvariance(t *testing.T) {
	pkg := kerneltest.Package{Name: "quant", Status: kerneltest.Statuses(quant.ImplementationStatus), Set: quant.SetImplementation, Current: quant.Implementation}
	kerneltest.AllImplementations(t, pkg, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(7, 7))
		for _, s := range [][3]int{{211, 320, 1}, {211, 320, 6}, {150, 1088, 66}} {
			rows, cols, n := s[0], s[1], s[2]
			m := quant.Matrix{Rows: rows, Cols: cols, Packed: make([]byte, rows*cols/2), Scales: make([]byte, rows*cols/quant.GroupSize)}
			for i := range m.Packed {
				m.Packed[i] = byte(rng.Uint32())
			}
			for i := range m.Scales {
				m.Scales[i] = byte(110 + rng.IntN(30))
				if rng.IntN(200) == 0 {
					m.Scales[i] = quant.SkipScale
				}
			}
			x := make([]float32, n*cols)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			ref := make([]float32, n*rows)
			quant.MatMul(nil, ref, m, x, n)
			for _, threads := range []int{1, 2, 3, 8} {
				p := par.New(threads)
				for _, r := range []tensor.Runner{p, kerneltest.GrainRunner{Pool: p, Grain: 1}, kerneltest.GrainRunner{Pool: p, Grain: 3}, kerneltest.GrainRunner{Pool: p, Grain: 7}, kerneltest.GrainRunner{Pool: p, Grain: 13}} {
					got := make([]float32, n*rows)
					quant.MatMul(r, got, m, x, n)
					for i := range got {
						if math.Float32bits(got[i]) != math.Float32bits(ref[i]) {
							t.Fatalf("%v threads %d: element %d: %v != %v", s, threads, i, got[i], ref[i])
						}
					}
				}
				p.Close()
			}
		}
	})
}
