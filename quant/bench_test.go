package quant_test

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/k3go/k3/internal/kernel/probe"
	"github.com/k3go/k3/internal/par"
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
		m := quant.Matrix{Rows: rows, Cols: cols, Packed: make([]byte, rows*cols/2), Scales: make([]byte, rows*cols/quant.GroupSize)}
		for i := range m.Packed {
			m.Packed[i] = byte(rng.Uint32())
		}
		for i := range m.Scales {
			m.Scales[i] = byte(115 + rng.IntN(10))
		}
		for _, batch := range []int{1, 8, 64} {
			x := make([]float32, batch*cols)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
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
