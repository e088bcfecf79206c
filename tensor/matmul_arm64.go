//go:build !purego

package tensor

import (
	"github.com/k3go/k3/internal/platform/cpu"
	"github.com/k3go/k3/internal/platform/kernel/gemm"
)

// archImpls holds the NEON kernels: the AVX2 chain (8 lanes, FMA, the same
// lane tree) on two 4-lane vectors, so they give the AVX2 kernels' bits. The
// vector helpers (Dot, Axpy, MatVecF64Acc) stay generic.
var archImpls = []*Impl{{
	Name: cpu.NEON,
	MatBF16: func(dst []float32, dstStride int, w []byte, rows, cols int, x []float32, n int) {
		gemm.NEONDense(dst, dstStride, w, rows, cols, x, n, true)
	},
	MatF32: func(dst []float32, dstStride int, w []byte, rows, cols int, x []float32, n int) {
		gemm.NEONDense(dst, dstStride, w, rows, cols, x, n, false)
	},
}}
