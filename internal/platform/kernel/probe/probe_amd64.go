//go:build !purego

package probe

import "github.com/k3go/k3/internal/platform/kernel/gemm"

func isa(impl string) *gemm.ISA {
	switch impl {
	case "avx2":
		return gemm.AVX2
	case "avx512":
		return gemm.AVX512
	}
	return nil
}

func fma(impl string, iters int) float64 {
	a := isa(impl)
	if a == nil {
		return fmaGo(iters)
	}
	a.FMAPeak(iters)
	return float64(iters) * 12 * 2 * float64(a.Lanes)
}

func read(impl string, buf []byte) {
	if a := isa(impl); a != nil {
		a.Read(buf)
		return
	}
	readGo(buf)
}
