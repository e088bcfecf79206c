package tensor_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/k3go/k3/internal/platform/kernel/probe"
	"github.com/k3go/k3/internal/platform/par"
	"github.com/k3go/k3/internal/testkit/benchdata"
	"github.com/k3go/k3/tensor"
)

// BenchmarkRoofline measures the machine in the same run as the kernels:
// Roofline/MemBandwidth/threadsN and Roofline/FMAPeak/threadsN.
func BenchmarkRoofline(b *testing.B) { probe.Benchmarks(b, tensor.Implementation()) }

func benchDense(b *testing.B, dt tensor.DType, shapes [][2]int) {
	for _, sh := range shapes {
		rows, cols := sh[0], sh[1]
		rng := rand.New(rand.NewPCG(1, uint64(rows)))
		w := benchWeights(rng, dt, rows, cols)
		for _, batch := range []int{1, 4, 8, 16, 64} {
			x := benchdata.Activations(rng, batch*cols)
			dst := make([]float32, batch*rows)
			for _, th := range probe.Threads() {
				b.Run(fmt.Sprintf("%dx%d/b%d/threads%d", rows, cols, batch, th), func(b *testing.B) {
					pool := par.New(th)
					defer pool.Close()
					probe.WarmUp(300*time.Millisecond, func() { tensor.MatMul(pool, dst, w, x, batch) })
					best := probe.Best{}
					for b.Loop() {
						best.Start()
						tensor.MatMul(pool, dst, w, x, batch)
						best.Stop()
					}
					best.Report(b, 2*float64(rows)*float64(cols)*float64(batch), float64(len(w.Data)))
				})
			}
		}
	}
}

// BenchmarkMatVecBF16 runs a trunk projection (12288×7168) and, with
// K3_BENCH_LMHEAD=1, the lm_head shape 163840×7168 (2.35 GB).
func BenchmarkMatVecBF16(b *testing.B) {
	shapes := [][2]int{{12288, 7168}}
	if os.Getenv("K3_BENCH_LMHEAD") == "1" {
		shapes = append(shapes, [2]int{163840, 7168})
	}
	benchDense(b, tensor.BF16, shapes)
}

func BenchmarkMatVecF32(b *testing.B) { benchDense(b, tensor.F32, [][2]int{{3584, 7168}}) }

// BenchmarkMatVecF64Acc runs the router shape (384 experts × 7168).
func BenchmarkMatVecF64Acc(b *testing.B) {
	rows, cols := 384, 7168
	rng := rand.New(rand.NewPCG(3, 3))
	w := benchWeights(rng, tensor.BF16, rows, cols)
	x := benchdata.Activations(rng, cols)
	dst := make([]float32, rows)
	for _, th := range probe.Threads() {
		b.Run(fmt.Sprintf("%dx%d/threads%d", rows, cols, th), func(b *testing.B) {
			pool := par.New(th)
			defer pool.Close()
			for b.Loop() {
				tensor.MatVecF64Acc(pool, dst, w, x)
			}
			s := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(2*float64(rows*cols)/s/1e9, "GFLOP/s")
			b.ReportMetric(float64(len(w.Data))/s/1e9, "GB/s")
		})
	}
}

func BenchmarkDot(b *testing.B) {
	x, y := dotInputs()
	var s float32
	for b.Loop() {
		s += tensor.Dot(x, y)
	}
	b.ReportMetric(2*float64(len(x))/(b.Elapsed().Seconds()/float64(b.N))/1e9, "GFLOP/s")
}

func BenchmarkAxpy(b *testing.B) {
	x, y := dotInputs()
	for b.Loop() {
		tensor.Axpy(y, 0.5, x)
	}
	b.ReportMetric(2*float64(len(x))/(b.Elapsed().Seconds()/float64(b.N))/1e9, "GFLOP/s")
}

// benchWeights returns a rows×cols matrix of dtype dt drawn like trained
// trunk weights (see internal/testkit/benchdata: arbitrary bytes would be full of
// subnormals, which cost Intel cores a microcode assist per FMA).
func benchWeights(rng *rand.Rand, dt tensor.DType, rows, cols int) tensor.Mat {
	data := benchdata.F32Weights(rng, rows*cols)
	if dt == tensor.BF16 {
		data = benchdata.BF16Weights(rng, rows*cols)
	}
	return tensor.Mat{DType: dt, Rows: rows, Cols: cols, Data: data}
}

// TestBenchDataNormal fails if the benchmarks' inputs hold a subnormal.
func TestBenchDataNormal(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	for _, dt := range []tensor.DType{tensor.BF16, tensor.F32} {
		w := benchWeights(rng, dt, 64, 7168)
		if (dt == tensor.BF16 && benchdata.HasSubnormalBF16(w.Data)) || (dt == tensor.F32 && benchdata.HasSubnormalF32Bytes(w.Data)) {
			t.Errorf("%v benchmark weights hold subnormals", dt)
		}
	}
	if x, y := dotInputs(); benchdata.HasSubnormalF32(x) || benchdata.HasSubnormalF32(y) {
		t.Error("Dot/Axpy benchmark inputs hold subnormals")
	}
	if benchdata.HasSubnormalF32(benchdata.Activations(rng, 1<<16)) {
		t.Error("benchmark activations hold subnormals")
	}
}

// dotInputs are the vectors of BenchmarkDot and BenchmarkAxpy: a hidden
// state's width and scale.
func dotInputs() (x, y []float32) {
	rng := rand.New(rand.NewPCG(4, 4))
	return benchdata.Activations(rng, 7168), benchdata.Activations(rng, 7168)
}
