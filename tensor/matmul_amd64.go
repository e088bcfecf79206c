//go:build !purego

package tensor

import (
	"github.com/k3go/k3/internal/platform/cpu"
	"github.com/k3go/k3/internal/platform/kernel/gemm"
)

var archImpls = []*Impl{
	simdImpl(cpu.AVX2, gemm.AVX2),
	simdImpl(cpu.AVX512, gemm.AVX512),
}

func simdImpl(name string, isa *gemm.ISA) *Impl {
	a := simd{isa}
	i := &Impl{Name: name, accel: a, vec: &vecOps{
		dot: func(x, y []float32) float32 {
			n := len(x) / 32
			var s float32
			if n > 0 {
				s = isa.Dot(x[:32*n], y[:32*n])
			}
			return dotTail(s, x[32*n:], y[32*n:])
		},
		axpy: func(y []float32, a float32, x []float32) {
			n := len(y) / 32 * 32
			if n > 0 {
				isa.Axpy(y[:n], a, x[:n])
			}
			axpyGeneric(y[n:], a, x[n:])
		},
		rowsF64: isa.MatVecF64,
	}}
	i.MatBF16 = func(dst []float32, dstStride int, w []byte, rows, cols int, x []float32, n int) {
		a.standalone(dst, dstStride, w, true, rows, cols, x, n)
	}
	i.MatF32 = func(dst []float32, dstStride int, w []byte, rows, cols int, x []float32, n int) {
		a.standalone(dst, dstStride, w, false, rows, cols, x, n)
	}
	return i
}

// simd adapts the shared gemm kernels to the tensor MatKernel contract.
type simd struct{ isa *gemm.ISA }

// denseChunkBytes is the weight bytes per parallel chunk of a mat-vec.
const denseChunkBytes = 512 << 10

func (s simd) grain(rowBytes, n int) int {
	if n > gemm.DirectT {
		return s.isa.Mc()
	}
	g := denseChunkBytes / max(rowBytes, 1)
	return max(gemm.RowsMV, g/gemm.RowsMV*gemm.RowsMV)
}

func (s simd) releaseX(b *[]float32) { gemm.PutX(b) }

func (s simd) packX(x []float32, cols, n int) ([]float32, *[]float32) {
	chunks := cols / s.isa.Lanes
	if n <= 1 || chunks == 0 {
		return nil, nil
	}
	b := gemm.GetX(s.isa.XLen(chunks, n))
	if n <= gemm.DirectT {
		s.isa.PackX(*b, x, cols, chunks, n, chunks, gemm.DirectT, nil)
	} else {
		s.isa.PackX(*b, x, cols, chunks, n, s.isa.KcChunks(), s.isa.T, nil)
	}
	return *b, b
}

func (s simd) mat(dst []float32, dstStride int, w []byte, bf16 bool, rows, cols int, x, px []float32, n int) {
	s.isa.Dense(dst, dstStride, w, rows, cols, x, px, n, bf16)
}

func (s simd) standalone(dst []float32, dstStride int, w []byte, bf16 bool, rows, cols int, x []float32, n int) {
	px, b := s.packX(x, cols, n)
	s.mat(dst, dstStride, w, bf16, rows, cols, x, px, n)
	if b != nil {
		gemm.PutX(b)
	}
}
