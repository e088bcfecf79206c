package tensor_test

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/k3go/k3/internal/kernel/probe"
	"github.com/k3go/k3/internal/par"
	"github.com/k3go/k3/tensor"
)

// BenchmarkRoofline measures the machine in the same run as the kernels:
// Roofline/MemBandwidth/threadsN and Roofline/FMAPeak/threadsN.
func BenchmarkRoofline(b *testing.B) { probe.Benchmarks(b, tensor.Implementation()) }

func benchDense(b *testing.B, dt tensor.DType, shapes [][2]int) {
	for _, sh := range shapes {
		rows, cols := sh[0], sh[1]
		rng := rand.New(rand.NewPCG(1, uint64(rows)))
		w := tensor.Mat{DType: dt, Rows: rows, Cols: cols, Data: realWeights(rng, dt, rows*cols)}
		for _, batch := range []int{1, 4, 8, 16, 64} {
			x := make([]float32, batch*cols)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
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
	w := tensor.Mat{DType: tensor.BF16, Rows: rows, Cols: cols, Data: realWeights(rng, tensor.BF16, rows*cols)}
	x := make([]float32, cols)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
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
	x, y := make([]float32, 7168), make([]float32, 7168)
	for i := range x {
		x[i], y[i] = float32(i%7), float32(i%5)
	}
	var s float32
	for b.Loop() {
		s += tensor.Dot(x, y)
	}
	b.ReportMetric(2*float64(len(x))/(b.Elapsed().Seconds()/float64(b.N))/1e9, "GFLOP/s")
}

func BenchmarkAxpy(b *testing.B) {
	x, y := make([]float32, 7168), make([]float32, 7168)
	for b.Loop() {
		tensor.Axpy(y, 0.5, x)
	}
	b.ReportMetric(2*float64(len(x))/(b.Elapsed().Seconds()/float64(b.N))/1e9, "GFLOP/s")
}

// realWeights returns n values of dtype dt that look like trained weights:
// normal numbers around ±0.02, never subnormal (Intel cores take a
// microcode assist on subnormal operands, which would measure the assist,
// not the kernel).
func realWeights(rng *rand.Rand, dt tensor.DType, n int) []byte {
	b := make([]byte, n*dt.Size())
	for i := 0; i < n; i++ {
		v := float32(rng.NormFloat64() * 0.02)
		if v == 0 {
			v = 0.02
		}
		switch dt {
		case tensor.BF16:
			binary.LittleEndian.PutUint16(b[2*i:], tensor.F32ToBF16(v))
		default:
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
		}
	}
	return b
}
