//go:build !purego

package tensor

import (
	"github.com/k3go/k3/internal/platform/cpu"
	"github.com/k3go/k3/internal/platform/kernel/gemm"
)

// archImpls holds the NEON kernels: the AVX2 chain (8 lanes, FMA, the same
// lane tree) on two 4-lane vectors, so they give the AVX2 kernels' bits. The
// vector helpers (Dot, Axpy, MatVecF64Acc) run the generic order, bit for
// bit (the self-check compares them exactly).
var archImpls = []*Impl{{
	Name: cpu.NEON,
	vec: &vecOps{
		dot: func(x, y []float32) float32 {
			n := len(x) / 32 * 32
			return dotTail(gemm.NEONDot(x[:n], y[:n]), x[n:], y[n:])
		},
		axpy: func(y []float32, a float32, x []float32) {
			n := len(y) / 32 * 32
			gemm.NEONAxpy(y[:n], a, x[:n])
			axpyGeneric(y[n:], a, x[n:])
		},
		rowsF64: gemm.NEONMatVecF64,
	},
	MatBF16: func(dst []float32, dstStride int, w []byte, rows, cols int, x []float32, n int) {
		gemm.NEONDense(dst, dstStride, w, rows, cols, x, n, true)
	},
	MatF32: func(dst []float32, dstStride int, w []byte, rows, cols int, x []float32, n int) {
		gemm.NEONDense(dst, dstStride, w, rows, cols, x, n, false)
	},
}}
