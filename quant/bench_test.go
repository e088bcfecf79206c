package quant_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/k3go/k3/internal/platform/kernel/probe"
	"github.com/k3go/k3/internal/platform/par"
	"github.com/k3go/k3/internal/testkit/benchdata"
	"github.com/k3go/k3/quant"
)

// BenchmarkRoofline measures the machine in the same run as the kernels:
// Roofline/MemBandwidth/threadsN and Roofline/FMAPeak/threadsN.
func BenchmarkRoofline(b *testing.B) { probe.Benchmarks(b, quant.Implementation()) }

// BenchmarkMatVecMXFP4 runs the expert shapes: gate/up 3072×3584 and down
// 3584×3072, for 1, 8 and 64 tokens.
func BenchmarkMatVecMXFP4(b *testing.B) {
	for _, sh := range [][2]int{{3072, 3584}, {3584, 3072}} {
		rows, cols := sh[0], sh[1]
		rng := rand.New(rand.NewPCG(2, uint64(rows)))
		m := benchMatrix(rng, rows, cols)
		for _, batch := range []int{1, 8, 64} {
			x := benchdata.Activations(rng, batch*cols)
			dst := make([]float32, batch*rows)
			for _, th := range probe.Threads() {
				b.Run(fmt.Sprintf("%dx%d/b%d/threads%d", rows, cols, batch, th), func(b *testing.B) {
					pool := par.New(th)
					defer pool.Close()
					probe.WarmUp(300*time.Millisecond, func() { quant.MatMul(pool, dst, m, x, batch) })
					best := probe.Best{}
					for b.Loop() {
						best.Start()
						quant.MatMul(pool, dst, m, x, batch)
						best.Stop()
					}
					best.Report(b, 2*float64(rows)*float64(cols)*float64(batch), float64(quant.Bytes(rows, cols)))
				})
			}
		}
	}
}

// benchMatrix is an expert matrix with the released checkpoint's nibble and
// scale frequencies (see internal/testkit/benchdata).
func benchMatrix(rng *rand.Rand, rows, cols int) quant.Matrix {
	packed, scales := benchdata.MXFP4(rng, rows, cols)
	return quant.Matrix{Rows: rows, Cols: cols, Packed: packed, Scales: scales}
}

// TestBenchDataNormal fails if the benchmark's matrix dequantises to
// subnormals or its activations hold any.
func TestBenchDataNormal(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	m := benchMatrix(rng, 64, 3584)
	if benchdata.HasSubnormalMXFP4(m.Scales) {
		t.Error("MXFP4 benchmark scales make subnormal weights")
	}
	if benchdata.HasSubnormalF32(benchdata.Activations(rng, 1<<16)) {
		t.Error("benchmark activations hold subnormals")
	}
}
