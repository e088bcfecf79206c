package quant_test

import (
	"math/rand/v2"
	"testing"

	"github.com/k3go/k3/internal/platform/kernel/kerneltest"
	"github.com/k3go/k3/internal/platform/par"
	"github.com/k3go/k3/quant"
	"github.com/k3go/k3/tensor"
)

// TestNoAllocs checks that MatMul allocates nothing in steady state,
// serially and through internal/platform/par.
func TestNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	pkg := kerneltest.Package{Name: "quant", Status: kerneltest.Statuses(quant.ImplementationStatus), Set: quant.SetImplementation, Current: quant.Implementation}
	kerneltest.AllImplementations(t, pkg, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 1))
		const rows, cols = 100, 576
		m := quant.Matrix{Rows: rows, Cols: cols, Packed: make([]byte, rows*cols/2), Scales: make([]byte, rows*cols/32)}
		for i := range m.Packed {
			m.Packed[i] = byte(rng.Uint32())
		}
		for i := range m.Scales {
			m.Scales[i] = 120
		}
		x := make([]float32, 70*cols)
		dst := make([]float32, 70*rows)
		p := par.New(2)
		defer p.Close()
		for _, r := range []tensor.Runner{nil, p} {
			for _, n := range []int{1, 5, 70} {
				f := func() { quant.MatMul(r, dst, m, x, n) }
				f()
				if a := testing.AllocsPerRun(20, f); a >= 1 {
					t.Errorf("MatMul n=%d: %v allocations per call", n, a)
				}
			}
		}
	})
}
