package tensor_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/k3go/k3/internal/platform/kernel/kerneltest"
	"github.com/k3go/k3/internal/platform/par"
	"github.com/k3go/k3/tensor"
)

// TestThreadInvariance checks that every implementation gives bit-identical
// results through internal/platform/par with 1, 2, 3 and 8 threads and odd grains.
func TestThreadInvariance(t *testing.T) {
	pkg := kerneltest.Package{Name: "tensor", Status: kerneltest.Statuses(tensor.ImplementationStatus), Set: tensor.SetImplementation, Current: tensor.Implementation}
	kerneltest.AllImplementations(t, pkg, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(7, 7))
		for _, dt := range []tensor.DType{tensor.BF16, tensor.F32} {
			for _, s := range [][3]int{{211, 333, 1}, {211, 333, 6}, {150, 1040, 66}} {
				rows, cols, n := s[0], s[1], s[2]
				w := tensor.Mat{DType: dt, Rows: rows, Cols: cols, Data: make([]byte, rows*cols*dt.Size())}
				for i := range w.Data {
					w.Data[i] = byte(rng.Uint32() & 0xBF) // finite values
				}
				x := make([]float32, n*cols)
				for i := range x {
					x[i] = float32(rng.NormFloat64())
				}
				ref := make([]float32, n*rows)
				tensor.MatMul(nil, ref, w, x, n)
				for _, threads := range []int{1, 2, 3, 8} {
					p := par.New(threads)
					for _, r := range []tensor.Runner{p, kerneltest.GrainRunner{Pool: p, Grain: 1}, kerneltest.GrainRunner{Pool: p, Grain: 3}, kerneltest.GrainRunner{Pool: p, Grain: 7}, kerneltest.GrainRunner{Pool: p, Grain: 13}} {
						got := make([]float32, n*rows)
						tensor.MatMul(r, got, w, x, n)
						for i := range got {
							if math.Float32bits(got[i]) != math.Float32bits(ref[i]) {
								t.Fatalf("%s %v threads %d %s: element %d: %v != %v", dt, s, threads, fmt.Sprint(r), i, got[i], ref[i])
							}
						}
					}
					p.Close()
				}
			}
		}
	})
}
