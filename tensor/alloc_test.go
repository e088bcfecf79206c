package tensor_test

import (
	"math/rand/v2"
	"testing"

	"github.com/k3go/k3/internal/platform/kernel/kerneltest"
	"github.com/k3go/k3/internal/platform/par"
	"github.com/k3go/k3/tensor"
)

// TestNoAllocs checks that MatMul, MatVecF64Acc, Dot and Axpy allocate
// nothing in steady state (scratch comes from pools), serially and through
// internal/platform/par.
func TestNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	pkg := kerneltest.Package{Name: "tensor", Status: kerneltest.Statuses(tensor.ImplementationStatus), Set: tensor.SetImplementation, Current: tensor.Implementation}
	kerneltest.AllImplementations(t, pkg, func(t *testing.T) {
		rng := rand.New(rand.NewPCG(1, 1))
		const rows, cols = 100, 520
		w := tensor.Mat{DType: tensor.BF16, Rows: rows, Cols: cols, Data: make([]byte, rows*cols*2)}
		for i := range w.Data {
			w.Data[i] = byte(rng.Uint32() & 0x3f)
		}
		x := make([]float32, 70*cols)
		dst := make([]float32, 70*rows)
		p := par.New(2)
		defer p.Close()
		for _, r := range []tensor.Runner{nil, p} {
			for _, n := range []int{1, 5, 70} {
				f := func() { tensor.MatMul(r, dst, w, x, n) }
				f()
				if a := testing.AllocsPerRun(20, f); a >= 1 {
					t.Errorf("MatMul n=%d: %v allocations per call", n, a)
				}
			}
			f := func() { tensor.MatVecF64Acc(r, dst, w, x) }
			f()
			if a := testing.AllocsPerRun(20, f); a >= 1 {
				t.Errorf("MatVecF64Acc: %v allocations per call", a)
			}
		}
		if a := testing.AllocsPerRun(20, func() { tensor.Axpy(dst[:cols], 2, x[:cols]); _ = tensor.Dot(x[:cols], dst[:cols]) }); a != 0 {
			t.Errorf("Dot/Axpy: %v allocations per call", a)
		}
	})
}
